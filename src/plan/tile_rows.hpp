#pragma once
// The tile table's rows (kernels/tile_table.hpp) as the planner's readers see them: the tensor-core
// rows as MXMOE_PLAN's mma= choices, how to force any row, the row a Plan runs, the tune table's plan
// of a row, and `mxmoe bench --tune`'s candidates.
#include <cstddef>
#include <optional>
#include <vector>

#include "kernels/tile_table.hpp"
#include "mxmoe/plan_override.hpp"
#include "mxmoe/runner.hpp"
#include "plan/plan.hpp"
#include "plan/tune_table.hpp"

namespace mxmoe::plan {

// A tensor-core row (Mma, Swap, Wgmma, WgmmaFp8) as an mma= choice; nullopt for the GEMV and MX rows.
std::optional<MmaTileChoice> mma_choice_of(const kernels::TileRow& row);
// The row of an mma= choice, or -1 when no row is that tile.
int row_of(const MmaTileChoice& choice);
// The row a plan runs (its family and tile), or -1 for a plan that names no row (an invalid one).
int row_of(const Plan& plan);
// The distinct values of a field over the GEMV rows, in table order (MXMOE_PLAN batch= and stages=).
std::vector<int> gemv_values(int kernels::TileRow::*field);

// What forces a row: the GEMV rows the gemv backend with batch= (and stages= off the default ring), the
// tensor-core rows the mma backend with mma=NAME, the W4A8 rows auto at precision fp8 with mma=NAME; the
// MX row is the MX backends' (mx-emulated runs on every device with the tile), with no key of its own.
struct TileForce {
  Backend backend = Backend::Auto;
  Precision precision = Precision::Bf16;
  PlanOverride plan;
};
TileForce force_of(const kernels::TileRow& row);

// The tune table's plan that selects the row, where a tune table can say it: not for the MX row (not
// an auto-backend choice) nor a GEMV ring off the default depth (a tune plan records none).
std::optional<TunePlan> tune_plan_of(const kernels::TileRow& row);
// `bench --tune`'s candidates: the indices of this build's rows that a tune plan can select, in table
// order (the bench then skips those the device cannot run).
std::vector<size_t> tune_candidates();

}  // namespace mxmoe::plan
