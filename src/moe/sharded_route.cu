// The expert-parallel rank's routing (sharded_route.hpp): one warp per token, the same top-k and softmax
// as the route kernel (common/warp_topk.cuh) or the same reading of the engine's pairs
// (common/routed_pairs.cuh), then the map from global to local experts.
#include <cmath>

#include "common/cuda_check.hpp"
#include "common/routed_pairs.cuh"
#include "common/warp_topk.cuh"
#include "moe/sharded_route.hpp"

namespace mxmoe::sharded {
namespace {

constexpr int kWarps = 8;

__global__ void __launch_bounds__(kWarps * 32) localize_kernel(LocalizeArgs a) {
  const int lane = threadIdx.x & 31;
  const int t = static_cast<int>(blockIdx.x) * kWarps + static_cast<int>(threadIdx.x >> 5);
  if (t >= a.tokens) return;  // whole warps leave together
  int id;
  float weight;
  if (a.ids != nullptr)
    routing::load_routed_pairs(a.ids, a.ids64, a.weights, static_cast<int64_t>(t) * a.top_k, a.top_k, a.top_k,
                               a.experts, lane, id, weight);
  else
    routing::warp_route_token(a.logits + static_cast<int64_t>(t) * a.experts, a.experts, a.top_k, a.softmax_first,
                              a.renormalize, lane, id, weight);
  if (lane < a.top_k) {
    // The readers give ids in [0, E), or -1 for a pair the engine dropped; a NaN weight marks a bad token
    // (NaN logits, or ids that are not distinct experts), which must stay visible: id local_experts is
    // out of range for the rank's runner, whose route then gives the token NaN (routed_pairs.cuh).
    const bool in_range = id >= 0 && id < a.experts;
    const int64_t p = static_cast<int64_t>(t) * a.top_k + lane;
    a.local_ids[p] = isnan(weight) ? a.local_experts : in_range ? a.global_to_local[id] : kDroppedPairId;
    a.local_weights[p] = weight;
  }
}

}  // namespace

void localize_pairs(const LocalizeArgs& args, cudaStream_t stream) {
  if (args.tokens == 0) return;
  const unsigned blocks = static_cast<unsigned>((args.tokens + kWarps - 1) / kWarps);
  localize_kernel<<<blocks, kWarps * 32, 0, stream>>>(args);
  MXMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace mxmoe::sharded
