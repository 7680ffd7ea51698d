#pragma once
// The expert-parallel rank's routing (ShardedMoe): each token's k pairs over the whole layer's experts
// (from the logits, or the engine's ids and weights), mapped to this rank's experts. A pair of another
// rank's expert becomes a dropped pair (kDroppedPairId), which the rank's route gives no row; a bad
// token stays visible (NaN on every rank).
#include <cuda_runtime.h>

#include <cstdint>

namespace mxmoe::sharded {

struct LocalizeArgs {
  const float* logits = nullptr;  // [T, E] fp32, or null when ids are given
  const void* ids = nullptr;      // [T, k] int32 (int64 with ids64)
  bool ids64 = false;
  const float* weights = nullptr;          // [T, k] fp32, with ids
  const int32_t* global_to_local = nullptr;  // [E] device: local id or -1
  int tokens = 0, experts = 0, top_k = 0, local_experts = 0;
  bool softmax_first = false, renormalize = false;
  int32_t* local_ids = nullptr;      // [T, k] out
  float* local_weights = nullptr;    // [T, k] out
};

void localize_pairs(const LocalizeArgs& args, cudaStream_t stream);

}  // namespace mxmoe::sharded
