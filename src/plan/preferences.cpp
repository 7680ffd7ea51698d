// The preference tables (preferences.hpp). Figures are us per layer, one lease each, from docs/perf/.
#include "plan/preferences.hpp"

#include <array>

namespace mxmoe::plan {
namespace {

// Below 2 rows per expert the GEMV family: one block routes and streams a few rows cheaply. H200:
// gpt-oss-120b 1 row per expert (T = 32) GEMV 334 / 16-row swap tile 335, 2 rows (T = 64) 450 / 439,
// 3 rows 499 / 479; gpt-oss-20b 1 row (T = 8) 93 / 121, 2 rows (T = 16) 136 / 139, 3 rows 144 / 142.
constexpr const char* kGemvBelow2 = "H200, GEMV against the 16-row swap-AB tile at 1-3 rows per expert";

// Without wgmma (bench --tune and forced tiles on an H200, both models): below 14 rows the 16-row
// swap-AB tile (120b T = 256, 8 rows: 596 against the 16-row plain tile's 655; T = 384, 12 rows: 696
// against 772-868; 20b T = 64: 163 / 176); 14 to 48 rows the 32-row swap tile (120b T = 1024: 1211,
// 64-row swap 1300; 20b T = 256: 319 / 376); from 48 the 64-row swap tile (120b T = 4096: 3684,
// 32-row swap 3879; 20b T = 4096: 3216 / 3590).
constexpr std::array<TilePreference, 4> kMmaSync{{
    {0, Family::Gemv, 0, false, kGemvBelow2},
    {2, Family::Mma, 1, true, "H200, 16-row swap-AB tile below 14 rows per expert (120b T = 256: 596 vs 655 us)"},
    {14, Family::Mma, 2, true, "H200, 32-row swap-AB tile at 14-48 rows (120b T = 1024: 1211 vs 1300 us)"},
    {48, Family::Mma, 4, true, "H200, 64-row swap-AB tile from 48 rows (120b T = 4096: 3684 vs 3879 us)"},
}};

// Hopper's wgmma tiles (bench --tune on an H200, gpt-oss-120b, bench/results/*_h200_*tune*): 32 rows
// per expert (T = 1024): 64-row swap 1185, 64-row wgmma 1109; 64 rows (T = 2048): 64-row wgmma 1685,
// 128-row 1617. The 32-row wgmma tile from 14 rows: 20b T = 128 (16 rows) 205 against the 32-row swap
// tile's 232; 120b 14 rows (T = 448) 716 / 719 against the 16-row swap tile. The 64-row tile against
// the 128-row one: 120b 48 / 56 rows 1029 / 1163 against 1113 / 1250.
constexpr std::array<TilePreference, 5> kHopper{{
    {0, Family::Gemv, 0, false, kGemvBelow2},
    {2, Family::Mma, 1, true, "H200, 16-row swap-AB tile at 2-14 rows per expert"},
    {14, Family::Wgmma, 2, false, "H200, 32-row wgmma tile from 14 rows (20b T = 128: 205 vs 232 us)"},
    {24, Family::Wgmma, 4, false, "H200, 64-row wgmma tile from 24 rows (120b T = 1024: 1109 vs 1185 us)"},
    {60, Family::Wgmma, 8, false, "H200, 128-row wgmma tile from 60 rows (120b T = 2048: 1617 vs 1685 us)"},
}};

}  // namespace

std::span<const TilePreference> tile_preferences(bool wgmma_usable) {
  if (wgmma_usable) return kHopper;
  return kMmaSync;
}

}  // namespace mxmoe::plan
