#pragma once
// The planner's measured defaults as data: which family and tile to run at each number of rows per
// expert, per kind of device, and the GEMV family's small-batch thresholds. Each row names the
// measurement that earns it its place (docs/perf/). A device's bench --tune table overrides the tile
// rows; PlanOverride forces any of them.
#include <span>

#include "plan/plan.hpp"

namespace mxmoe::plan {

struct TilePreference {
  double min_rows;   // from this many rows per expert on, until the next row's
  Family family;     // Gemv, Mma or Wgmma
  int m_tiles;       // tensor-core tiles: rows of one expert per block / 16
  bool swap_ab;
  const char* evidence;
};

// With Hopper's wgmma tiles usable, and without (SM120/SM121, or wgmma off or not built).
std::span<const TilePreference> tile_preferences(bool wgmma_usable);

// The GEMV family's 16-row batch from this many rows per expert on (where it is built and fits).
inline constexpr double kWideBatchMinRows = 6.0;
// The largest T whose GEMMs route the tokens themselves, and whose GEMM2 does the combine.
inline constexpr int kDefaultLocalRouteTokens = 2;
inline constexpr int kDefaultFusedCombineTokens = 2;
// GEMV GEMM2 counted per slot (route and combine kernels running) up to this T.
inline constexpr int64_t kCountedMaxTokens = 8;

}  // namespace mxmoe::plan
