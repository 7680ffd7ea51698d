#pragma once
// The tile table: one row per tile of every kernel family, read by host and device code alike (plain
// C++20, no CUDA header). The kernel translation units instantiate and dispatch their family's rows
// (for_each_row, with_row) and static-assert each row's figures against their own shapes; the planner,
// MXMOE_PLAN, the tune table and `mxmoe bench --tune` take the tiles and their names from here. Adding
// a tile is one row (plus the kernel, if it is a new kernel). Every row says what earns it its place;
// figures are us per layer, gpt-oss-120b unless 20b is named (docs/perf/).
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace mxmoe::kernels {

enum class TileFamily : uint8_t {
  Gemv,   // GEMV (gemv/): weights streamed once per batch of an expert's rows
  Mma,    // mma.sync with the weights decoded in registers on N (mma/mma_gemm_kernel.cu)
  Swap,   // mma.sync swap-AB, the weights on M (mma/swap_gemm_kernel.cu)
  Wgmma,  // Hopper's warpgroup MMA (sm90/wgmma_gemm_kernel.cu)
  Mx,     // MXFP8 activations, emulated or native MX atom (mma/mx_gemm_kernel.cu)
  WgmmaFp8,  // Hopper's FP8 (W4A8) warpgroup MMA (sm90/wgmma_fp8_gemm_kernel.cu): Precision::Fp8 only
};

// The architectures where a tile runs (a bit set). Every tile is compiled for every architecture of
// the build; elsewhere it is a stub (the wgmma tiles trap on SM12x) or not run.
inline constexpr uint8_t kArchSm90a = 1;  // compute capability 9.0 with the sm_90a cubin
inline constexpr uint8_t kArchSm12x = 2;  // SM120/SM121: sm_120a/sm_121a (or the 120f/121f family)
inline constexpr uint8_t kArchSm8x = 4;   // Ampere and Ada: sm_80, sm_86, sm_89 code (cp.async loaders)
// The bit of the compute capability of the code a device runs (plan/device_caps.hpp); 0 (no tile) for
// the others, which this build has no code for.
constexpr uint8_t arch_of(int cc_major, int cc_minor) {
  return cc_major == 9 && cc_minor == 0 ? kArchSm90a : cc_major == 12 ? kArchSm12x : cc_major == 8 ? kArchSm8x : 0;
}

// SM120/SM121's opt-in shared memory per block (FACTS.md §5), and what the tensor-core tiles' static
// shared memory may take next to their dynamic bytes (the m-tile, its rows' offsets, barriers): the
// 128-row swap-AB tile's 99,328 dynamic bytes leave 2,048. A GPU test holds the measured static sizes
// to it (test_gpu_planner.cpp); the planner adds it for a target without its GPU (plan/device_caps.hpp).
inline constexpr size_t kSm12xSmemPerBlock = 101376;
inline constexpr size_t kTileStaticSmemAllowance = 1536;
// A GEMV row's shared memory: it stages an expert's whole activation rows, so it depends on K:
// gemv::smem_bytes(k, stages) (gemv/gemv.hpp) and gemv::wide_batch_fits.
inline constexpr int kSmemOfK = 0;

struct TileRow {
  TileFamily family;
  std::string_view name;  // printable; MXMOE_PLAN's mma= takes the tensor-core rows' names
  int rows;               // rows of one expert per block (tokens per block; the GEMV batch)
  int weight_rows;        // weight rows per block (GEMV: at split-K 1)
  int k_chunk;            // K per pipeline step (a GEMV ring stage holds two)
  int stages;             // pipeline (ring) stages
  int warps;              // warps per block
  int smem_bytes;         // dynamic shared memory per block, or kSmemOfK
  uint8_t archs;          // where it runs: kArchSm90a | kArchSm12x | kArchSm8x
  bool minimal;           // in the minimal build profile (MXMOE_MINIMAL): one tile per family
};

inline constexpr uint8_t kArchAny = kArchSm90a | kArchSm12x | kArchSm8x;  // every architecture above

inline constexpr TileRow kTileTable[] = {
    // GEMV, 8-row batches, 2 ring stages: every family's floor below 2 rows per expert (H200: 120b 1 row
    // 334 against the 16-row swap tile's 335, 20b 1 row 93 / 121; preferences.cpp). 2 stages beat 3 at
    // decode sizes (ec4732d, H200: T = 1 30.9 / 32.1, T = 4 81.3 / 89.3) and fit SM12x at K = 2880.
    {TileFamily::Gemv, "gemv8", 8, 128, 128, 2, 8, kSmemOfK, kArchAny, true},
    // The 3-stage ring, forced only (MXMOE_PLAN stages=3): 3 stages lost at T = 1 and 4 on both chips
    // (H200 395901a: T = 1 23.7 -> 25.1, T = 4 68.6 -> 77.4; H100 3c8be94: 26.0 -> 27.0, 85.0 -> 87.4) but
    // won at T = 2 and 8 on the H100 (44.8 -> 43.8, 151.5 -> 146.9). A tune table records no ring depth,
    // so `bench --tune` does not time it.
    {TileFamily::Gemv, "gemv8s3", 8, 128, 128, 3, 8, kSmemOfK, kArchAny, false},
    // 16-row batches (e4c0d15), the gemv backend's from 6 rows per expert: bench --tune, 8 / 16 rows,
    // T = 256 796 / 668, T = 384 1166 / 832; 20b T = 64 225 / 181. SM12x's 99 KB do not hold its rows
    // at K = 2880 (gemv::wide_batch_fits).
    {TileFamily::Gemv, "gemv16", 16, 256, 128, 2, 16, kSmemOfK, kArchAny, false},
    // The register-decode tiles: 16 * m_tiles rows x 256 weight rows, 2 stages (4/3 stages measured no
    // faster on an H200: T = 1024 3% slower). The 16-row tile: 20b T = 64 176 against 16-row GEMV batches'
    // 180 and the 32-row swap tile's 190 (a78ab88).
    {TileFamily::Mma, "16", 16, 256, 128, 2, 8, 45056, kArchAny, false},
    // The 32-row tile: bench --tune at 95760d4 found it faster than the 64-row one at every T (T = 4096
    // 4.54-4.71 against 5.08-5.11 ms); H100 T = 512 900-902 (58fc6f8).
    {TileFamily::Mma, "32", 32, 256, 128, 2, 8, 55296, kArchAny, false},
    // The 64-row tile: the minimal profile's, and the planner's fallback where the build lacks its
    // preferred tile. Against GEMV (505da60, H200): T = 1024 1523.6 / 2787.9, T = 4096 5113 / 10587.
    {TileFamily::Mma, "64", 64, 256, 128, 2, 8, 75776, kArchAny, true},
    // Swap-AB, the 16-row tile, 2 to 14 rows per expert (6a616a8, H200): T = 256 (8 rows) 596-598
    // against the 16-row register tile's 655-659, T = 128 523-535 / 612-615; 20b T = 64 163 / 176.
    {TileFamily::Swap, "swap16", 16, 256, 128, 2, 8, 45056, kArchAny, false},
    // The 32-row swap tile, 14 to 48 rows without wgmma (a78ab88, H200): T = 1024 1211 against the 64-row
    // swap tile's 1300; 20b T = 256 319 / 376.
    {TileFamily::Swap, "swap32", 32, 256, 128, 2, 8, 55296, kArchAny, false},
    // The 64-row swap tile, from 48 rows without wgmma (a78ab88, H200): T = 4096 3684 against the 32-row
    // swap tile's 3879; 20b T = 4096 3216 / 3590.
    {TileFamily::Swap, "swap64", 64, 256, 128, 2, 8, 75776, kArchAny, false},
    // The 128-row swap tile (128 weight rows: 4 x 2 warps): the widest tile SM12x's 99 KB hold, for
    // large batches there (not run on SM12x yet). On Hopper the wgmma tiles beat it (H100 T = 2048
    // 2674-2798, 58fc6f8), and the planner never picks it there.
    {TileFamily::Swap, "swap128", 128, 128, 128, 2, 8, 99328, kArchAny, false},
    // Hopper's wgmma tiles, 256 weight rows, 16 warps. The 32-row tile, two blocks per SM, from 14 rows
    // per expert (8af4d6e, H200): 20b T = 128 205 against the 32-row swap tile's 232; T = 640 (20 rows)
    // 736 / 835.
    {TileFamily::Wgmma, "wgmma32", 32, 256, 128, 4, 16, 103424, kArchSm90a, false},
    // The 64-row tile, from 24 rows, 3 stages so that two blocks fit an SM: T = 1024 1109 against the
    // 64-row swap tile's 1185 (H200, ff4ca8c); two blocks per SM (7cd0ef1, H100) T = 1024 920 -> 860.
    {TileFamily::Wgmma, "wgmma64", 64, 256, 128, 3, 16, 102400, kArchSm90a, false},
    // The 128-row tile, one block per SM, from 60 rows (59a500f, H200): 64 rows 1304-1311 against the
    // 64-row tile's 1450-1454; T = 2048 1617 / 1685.
    {TileFamily::Wgmma, "wgmma128", 128, 256, 128, 4, 16, 201728, kArchSm90a, false},
    // The MX backends' one tile (MXFP8 x MXFP4, 64 rows x 256 weight rows): the path to SM12x's native
    // block-scaled MMA (not run yet). Emulated on an H200 (e4c0d15): T = 1 223, T = 1024 3428.
    {TileFamily::Mx, "mx64", 64, 256, 128, 2, 8, 56320, kArchAny, true},
    // Hopper's FP8 (W4A8) wgmma tiles (docs/fp8.md): the wgmma tiles' shape with e4m3 operands, one
    // 128-byte activation line per row and chunk (half the bytes of bf16), 4 stages in every height (two
    // blocks per SM up to 64 rows, one from 128: Fp8Shape says why). Planned at precision fp8 only. Forced
    // one at a time on an H200 (2026-11-28_h200_fp8_tiles.txt, early kernels), 32 / 64 / 128 rows: T = 512
    // 877 / 1081 / 1322, T = 2048 2039 / 1661 / 1423; faster than bf16 from T = 1024 since (docs/fp8.md).
    {TileFamily::WgmmaFp8, "fp8wgmma32", 32, 256, 128, 4, 16, 87040, kArchSm90a, false},
    {TileFamily::WgmmaFp8, "fp8wgmma64", 64, 256, 128, 4, 16, 103424, kArchSm90a, false},
    {TileFamily::WgmmaFp8, "fp8wgmma128", 128, 256, 128, 4, 16, 136192, kArchSm90a, false},
    // The 192-row tile, 12 warps (192 weight rows: its 96 accumulators a thread need more registers than a
    // 16-warp block leaves, 128 against 168), one m-tile for an expert of up to 192 rows (gpt-oss-120b: 128 +- 11 at T = 4096,
    // where the 128-row tile runs a second, nearly empty m-tile for half the experts).
    {TileFamily::WgmmaFp8, "fp8wgmma192", 192, 192, 128, 4, 12, 152576, kArchSm90a, false},
};
inline constexpr size_t kTileCount = std::size(kTileTable);

#if defined(MXMOE_MINIMAL)
inline constexpr bool kMinimalProfile = true;
#else
inline constexpr bool kMinimalProfile = false;
#endif
// Whether this build has the row's kernels.
constexpr bool row_built(const TileRow& r) { return r.minimal || !kMinimalProfile; }
// The row of a compile-time index (std::integral_constant<size_t, I>, as for_each_row passes).
template <class Index>
inline constexpr const TileRow& kRowOf = kTileTable[Index::value];

// The index of the family's row of `rows` rows (and `stages`, where given), built or not; -1 if none.
constexpr int find_row(TileFamily family, int rows, int stages = 0) {
  for (size_t i = 0; i < kTileCount; ++i)
    if (kTileTable[i].family == family && kTileTable[i].rows == rows && (stages == 0 || kTileTable[i].stages == stages))
      return static_cast<int>(i);
  return -1;
}
// Whether this build has the family's tile of `rows` rows.
constexpr bool tile_built(TileFamily family, int rows, int stages = 0) {
  const int i = find_row(family, rows, stages);
  return i >= 0 && row_built(kTileTable[i]);
}
// This build's rows of the family that run on `arch` (an arch_of bit), and whether each of them fits
// `room` bytes per block next to `static_bytes` (true when there is none).
constexpr int rows_on(TileFamily family, uint8_t arch) {
  int n = 0;
  for (const TileRow& r : kTileTable) n += r.family == family && row_built(r) && (r.archs & arch) != 0;
  return n;
}
constexpr bool rows_fit(TileFamily family, uint8_t arch, size_t room, size_t static_bytes) {
  for (const TileRow& r : kTileTable)
    if (r.family == family && row_built(r) && (r.archs & arch) != 0 && r.smem_bytes + static_bytes > room) return false;
  return true;
}
// The built rows' counts of the family, e.g. "1, 2, 4" (per = 16: m16 tiles), for error messages.
inline std::string built_rows_list(TileFamily family, int per = 1) {
  std::string s;
  for (const TileRow& r : kTileTable)
    if (r.family == family && row_built(r)) s += (s.empty() ? "" : ", ") + std::to_string(r.rows / per);
  return s.empty() ? "none in this (minimal) profile" : s;
}

namespace detail {
template <TileFamily F, bool kBuiltOnly, class Fn, size_t... I>
constexpr void visit_rows(Fn&& f, std::index_sequence<I...>) {
  (
      [&] {
        if constexpr (kTileTable[I].family == F && (!kBuiltOnly || row_built(kTileTable[I])))
          f(std::integral_constant<size_t, I>{});
      }(),
      ...);
}
}  // namespace detail

// f(std::integral_constant<size_t, I>) for each row I of the family that this build has, in table
// order: the kernel translation units' instantiations.
template <TileFamily F, class Fn>
constexpr void for_each_row(Fn&& f) {
  detail::visit_rows<F, true>(f, std::make_index_sequence<kTileCount>{});
}
// Whether pred(std::integral_constant<size_t, I>) holds for every row I of the family, built or not:
// the translation units' static asserts of their rows.
template <TileFamily F, class Pred>
constexpr bool all_rows_of(Pred&& pred) {
  bool ok = true;
  detail::visit_rows<F, false>([&](auto i) { ok = pred(i) && ok; }, std::make_index_sequence<kTileCount>{});
  return ok;
}
// Run-time dispatch: f(std::integral_constant<size_t, I>) for the built row I of the family with
// `rows` rows (the first such row: the GEMV family's default ring); false when there is none.
template <TileFamily F, class Fn>
bool with_row(int rows, Fn&& f) {
  bool found = false;
  for_each_row<F>([&](auto i) {
    if (!found && kRowOf<decltype(i)>.rows == rows) {
      found = true;
      f(i);
    }
  });
  return found;
}

// The table's own checks: names unique, and every tile that runs on SM120/SM121 fits its 99 KB per
// block next to the static allowance (the kernels assert that their rows' bytes are their own).
constexpr bool names_unique() {
  for (size_t i = 0; i < kTileCount; ++i)
    for (size_t j = i + 1; j < kTileCount; ++j)
      if (kTileTable[i].name == kTileTable[j].name) return false;
  return true;
}
// SM86/SM89 allow the same 99 KB per block as SM120/SM121 (A100: 163 KB).
constexpr bool sm12x_rows_fit() {
  for (const TileRow& r : kTileTable)
    if ((r.archs & (kArchSm12x | kArchSm8x)) != 0 && r.smem_bytes + kTileStaticSmemAllowance > kSm12xSmemPerBlock)
      return false;
  return true;
}
static_assert(names_unique(), "tile names are unique: MXMOE_PLAN and the tune output name tiles by them");
static_assert(sm12x_rows_fit(), "every SM120/SM121 and SM8x tile fits 101,376 B with the static allowance");

}  // namespace mxmoe::kernels
