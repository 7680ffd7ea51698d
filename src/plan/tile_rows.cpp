// The tile table's rows as the planner's readers see them (tile_rows.hpp).
#include "plan/tile_rows.hpp"

#include <algorithm>

#include "kernels/gemv/gemv.hpp"

namespace mxmoe::plan {

using kernels::kTileTable;
using kernels::TileFamily;
using kernels::TileRow;

std::optional<MmaTileChoice> mma_choice_of(const TileRow& row) {
  switch (row.family) {
    case TileFamily::Mma: return MmaTileChoice{row.rows, MmaForm::Plain};
    case TileFamily::Swap: return MmaTileChoice{row.rows, MmaForm::SwapAb};
    case TileFamily::Wgmma: return MmaTileChoice{row.rows, MmaForm::Wgmma};
    case TileFamily::WgmmaFp8: return MmaTileChoice{row.rows, MmaForm::WgmmaFp8};
    case TileFamily::Gemv:
    case TileFamily::Mx: break;
  }
  return std::nullopt;
}

int row_of(const MmaTileChoice& choice) {
  for (size_t i = 0; i < kernels::kTileCount; ++i)
    if (mma_choice_of(kTileTable[i]) == choice) return static_cast<int>(i);
  return -1;
}

int row_of(const Plan& p) {
  switch (p.family) {
    case Family::Gemv: return kernels::find_row(TileFamily::Gemv, p.batch_rows, p.stages);
    case Family::Mma: return kernels::find_row(p.swap_ab ? TileFamily::Swap : TileFamily::Mma, 16 * p.m_tiles);
    case Family::Wgmma: return p.swap_ab ? -1 : kernels::find_row(TileFamily::Wgmma, 16 * p.m_tiles);
    case Family::WgmmaFp8: return kernels::find_row(TileFamily::WgmmaFp8, 16 * p.m_tiles);
    case Family::Mx:  // the MX backends' one tile
      for (size_t i = 0; i < kernels::kTileCount; ++i)
        if (kTileTable[i].family == TileFamily::Mx) return static_cast<int>(i);
      return -1;
  }
  return -1;
}

std::vector<int> gemv_values(int TileRow::*field) {
  std::vector<int> out;
  for (const TileRow& r : kTileTable)
    if (r.family == TileFamily::Gemv && std::find(out.begin(), out.end(), r.*field) == out.end())
      out.push_back(r.*field);
  return out;
}

TileForce force_of(const TileRow& row) {
  TileForce f;
  switch (row.family) {
    case TileFamily::Gemv:
      f.backend = Backend::Gemv;
      f.plan.gemv_batch_rows = row.rows;
      if (row.stages != gemv::kDefaultStages) f.plan.gemv_stages = row.stages;
      break;
    case TileFamily::Mma:
    case TileFamily::Swap:
    case TileFamily::Wgmma:
      f.backend = Backend::Mma;
      f.plan.mma_tile = mma_choice_of(row);
      break;
    case TileFamily::Mx: f.backend = Backend::MxEmulated; break;
    case TileFamily::WgmmaFp8:  // auto at precision fp8 with mma=NAME
      f.precision = Precision::Fp8;
      f.plan.mma_tile = mma_choice_of(row);
      break;
  }
  return f;
}

std::optional<TunePlan> tune_plan_of(const TileRow& row) {
  TunePlan p;
  switch (row.family) {
    case TileFamily::Gemv:
      if (row.stages != gemv::kDefaultStages) return std::nullopt;
      p.batch_rows = row.rows;
      return p;
    case TileFamily::Mma:
    case TileFamily::Swap:
    case TileFamily::Wgmma:
      p.mma = true;
      p.m_tiles = row.rows / 16;
      p.swap_ab = row.family == TileFamily::Swap;
      p.wgmma = row.family == TileFamily::Wgmma;
      return p;
    case TileFamily::Mx:
    case TileFamily::WgmmaFp8: break;
  }
  return std::nullopt;
}

std::vector<size_t> tune_candidates() {
  std::vector<size_t> out;
  for (size_t i = 0; i < kernels::kTileCount; ++i)
    if (kernels::row_built(kTileTable[i]) && tune_plan_of(kTileTable[i])) out.push_back(i);
  return out;
}

}  // namespace mxmoe::plan
