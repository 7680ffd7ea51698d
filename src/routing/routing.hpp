#pragma once
// Device routing: route (top-k + softmax, both orders), permute (stable by expert, then token, then
// slot) and combine (each token's k rows summed in a fixed order). Launchers are host functions.
#include <cuda_runtime.h>

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
  int32_t* pair_row;        // [T*k]   pair -> sorted row
  int32_t* global_counts;   // [257]   scratch of the multi-block route: histogram [256], then a ticket
  int32_t* ticket;          //         = global_counts + 256
};

// Routing of T tokens from fp32 logits [T, E], histogram, scan and the stable order: one launch for
// T <= 8, else a memset of the histogram and one launch.
void route_and_permute(const MoeConfig& config, const float* logits, int64_t tokens, const RoutingBuffers& buffers,
                       cudaStream_t stream);

// out[t, :] = bf16( sum over s < k of rows[pair_row[t*k+s], :] ), rows fp32 [T*k, H].
void combine_rows(const float* rows, const int32_t* pair_row, int64_t tokens, int top_k, int hidden, uint16_t* out,
                  cudaStream_t stream);

}  // namespace mxmoe::routing
