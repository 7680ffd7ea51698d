#pragma once
// Device routing: route (top-k + softmax, both orders), permute (stable by expert, then token, then
// slot) and combine (each token's k rows summed in a fixed order). Launchers are host functions.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "mxmoe/config.hpp"

namespace mxmoe::routing {

// Device buffers written by route_and_permute, sized for the forward's T (workspace.hpp lays them out).
struct RoutingBuffers {
  int32_t* expert_ids;      // [T*k]   pair p = t*k + s -> expert (slot order: descending logit)
  float* pair_weights;      // [T*k]   routing weight of pair p
  int32_t* expert_offsets;  // [E+1]   rows of expert e are [offsets[e], offsets[e+1])
  int32_t* active_experts;  // [E]     experts with >= 1 row, ascending; count in active_count
  int32_t* active_count;    // [1]
  int32_t* row_pair;        // [T*k]   sorted row -> pair
  int32_t* pair_row;        // [T*k]   pair -> sorted row, -1 for a dropped pair (expert id -1)
  int32_t* segment_counts;  // [segments, E] scratch of the multi-block route: each segment's histogram
  // [E] or null: zeroed by the route once the previous forward is complete (GEMM1's blocks done per
  // expert or slot: mma::MmaArgs::expert_done, gemv::GemvArgs::slot_done).
  int32_t* zero_counts = nullptr;
};

// The multi-block route (T > 8) counts experts per segment of this many tokens (a multiple of 16, one
// route block's tokens), at most kMaxRouteSegments segments: each segment's pairs are ranked by one block.
inline constexpr int64_t kMaxRouteSegments = 128;
inline int route_segment_tokens(int64_t tokens) {
  const int64_t per = (tokens + kMaxRouteSegments - 1) / kMaxRouteSegments;
  return static_cast<int>(std::max<int64_t>(64, (per + 15) / 16 * 16));
}

// What a forward is routed by: the router logits [T, E] fp32 (top-k and softmax in the config's order),
// or the engine's own routing, ids [T, k] (int32, or int64 with ids64) and weights [T, k] fp32, used as
// given (no softmax, no renormalisation; slot order is the combine's order). Device pointers for the GPU
// backends, host pointers for the reference. The next issue's expert map belongs to the second form.
struct RouteSource {
  const float* logits = nullptr;
  const void* topk_ids = nullptr;
  bool ids64 = false;
  const float* topk_weights = nullptr;
  bool routed() const { return topk_ids != nullptr; }
};

// Routing of T tokens (from the logits, or the given ids and weights: common/routed_pairs.cuh says what
// ids that are not k distinct experts in [0, E) become), histogram, scan and the stable order: one launch
// for T <= 8, else a memset of the segment histograms and two launches. Either source fills the same
// buffers the same way, so a forward routed by ids equal to the logits route's gives the same bits.
void route_and_permute(const MoeConfig& config, const RouteSource& source, int64_t tokens,
                       const RoutingBuffers& buffers, cudaStream_t stream);
inline void route_and_permute(const MoeConfig& config, const float* logits, int64_t tokens,
                              const RoutingBuffers& buffers, cudaStream_t stream) {
  RouteSource source;
  source.logits = logits;
  route_and_permute(config, source, tokens, buffers, stream);
}

// out[t, :] = bf16( sum over s < k of rows[pair_row[t*k+s], :] ) in fp32, rows fp32 [T*k, H]; rows -1 skipped.
void combine_rows(const float* rows, const int32_t* pair_row, int64_t tokens, int top_k, int hidden, uint16_t* out,
                  cudaStream_t stream);
// The same from bf16 rows (the swap-AB and wgmma tiles' GEMM2: half the bytes written and read back).
void combine_bf16_rows(const uint16_t* rows, const int32_t* pair_row, int64_t tokens, int top_k, int hidden,
                       uint16_t* out, cudaStream_t stream);
// Both with the fp32 sums as output, before the bf16 rounding (MoeRunner::forward_f32: a shard's partial
// output, summed over the ranks in fp32 so that the layer's output rounds once).
void combine_rows(const float* rows, const int32_t* pair_row, int64_t tokens, int top_k, int hidden, float* out,
                  cudaStream_t stream);
void combine_bf16_rows(const uint16_t* rows, const int32_t* pair_row, int64_t tokens, int top_k, int hidden,
                       float* out, cudaStream_t stream);

}  // namespace mxmoe::routing
