#pragma once
// The launch arguments every grouped expert GEMM shares (the GEMV family, the tensor-core family with
// its atoms): one GEMM's weights in the GEMV layout, the routing of the forward, the epilogue's
// parameters. Each family's argument struct adds its own fields to these.
#include <cstdint>

namespace mxmoe::kernels {

struct GroupedWeights {
  const uint8_t* weights = nullptr;  // packed weights and scales (gemv_layout.hpp), experts back to back
  int64_t expert_stride = 0;         // bytes
  const uint16_t* bias = nullptr;    // [E, N] bf16 in checkpoint row order, or null
  int n = 0;                         // output rows per expert in the checkpoint (2I or H)
  int k = 0;                         // K (H or I), multiple of 32
  int chunks = 0, tiles = 0;         // K chunks of 128, 16-row weight tiles
  int experts = 0;                   // experts in `weights`
};

struct GroupedRouting {
  const int32_t* row_pair = nullptr;        // sorted row -> pair
  int top_k = 1;
  const int32_t* expert_offsets = nullptr;  // [E+1]
  const int32_t* active_experts = nullptr;  // experts with rows, ascending
  const int32_t* active_count = nullptr;
  const float* pair_weights = nullptr;      // pair -> routing weight
  float alpha = 1.702f, limit = 7.0f;       // the clamped SwiGLU of GEMM1's epilogue
};

}  // namespace mxmoe::kernels
