// Plan::to_string: the plan in words (MXMOE_LOG=plan, mxmoe bench, mxmoe plan, describe_plan).
#include "plan/plan.hpp"

#include <sstream>

#include "kernels/gemv/gemv.hpp"
#include "plan/tile_rows.hpp"

namespace mxmoe::plan {
namespace {

// The plan's tile as M x N x K, from its row of the tile table: the weight rows first where the weights
// are on the MMA's M (swap-AB, wgmma), the rows of an expert first otherwise; "?" for no row.
std::string tile_shape(const Plan& p, bool weights_first) {
  const int i = row_of(p);
  if (i < 0) return "?";
  const kernels::TileRow& r = kernels::kTileTable[i];
  return std::to_string(weights_first ? r.weight_rows : r.rows) + "x" +
         std::to_string(weights_first ? r.rows : r.weight_rows) + "x" + std::to_string(r.k_chunk);
}

}  // namespace

const char* to_string(Family family) {
  switch (family) {
    case Family::Gemv: return "gemv";
    case Family::Mma: return "mma";
    case Family::Wgmma: return "wgmma";
    case Family::Mx: return "mx";
    case Family::WgmmaFp8: return "wgmma-fp8";
  }
  return "?";
}

std::string Plan::to_string() const {
  std::ostringstream os;
  const char* tuned = from_tune_table ? " (tune table)" : "";
  switch (family) {
    case Family::Mx:
      os << (mx_planted_fault ? "mx with a planted fault (the self-test's test)"
             : mx_native    ? "mx native (block-scaled mma.sync kind::mxf8f6f4)"
                            : "mx emulated (e4m3 mma.sync, scales in fp32)")
         << " " << tile_shape(*this, false) << " tiles, MXFP8 expand (RCEIL) before gemm1, "
         << (mx_expand_intermediate ? "fp32 intermediate + MXFP8 expand before gemm2" : "MXFP8 epilogue in gemm1");
      break;
    case Family::WgmmaFp8:
      os << "wgmma fp8 (W4A8) " << tile_shape(*this, true)
         << " tiles (sm_90a), e4m3 tokens (one scale each), gemm1 writes e4m3 rows (static scale)" << tuned;
      if (ksplit1 > 1 || ksplit2 > 1) os << ", split-K " << ksplit1 << " / " << ksplit2 << " (clusters)";
      break;
    case Family::Wgmma:  // weights on M (one 16-row tile per warp) x the rows of an expert on N x K
      os << "wgmma bf16 " << tile_shape(*this, true) << " tiles (sm_90a), both gemms" << tuned;
      break;
    case Family::Mma:
      if (swap_ab)  // weights on the MMA's M side: M (weight rows) x N (rows of an expert) x K
        os << "mma bf16 swap-AB " << tile_shape(*this, true) << " tiles, both gemms" << tuned;
      else
        os << "mma bf16 " << tile_shape(*this, false) << " tiles, both gemms" << tuned;
      break;
    case Family::Gemv:
      os << "gemv 16x" << batch_rows << " tiles";
      if (batch_rows == gemv::kWideBatchRows) os << " (256x16 per block)";
      else os << ", gemm1 ksplit " << ksplit1 << ", gemm2 ksplit " << ksplit2;
      os << ", " << max_active << " expert slots";
      if (stages != gemv::kDefaultStages) os << ", ring stages " << stages << "/" << stages;
      if (local_route) os << ", routed in both gemms";
      if (fused_combine) os << ", combine in gemm2";
      if (cluster_combine) os << " (a cluster of the slots)";
      if (counted) os << ", gemm2 per slot as gemm1 ends it";
      break;
  }
  return os.str();
}

}  // namespace mxmoe::plan
