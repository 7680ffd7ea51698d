#pragma once
// The fused decode path for small batches (T <= kDecodeMaxTokens): one kernel routes, runs GEMM1 +
// SwiGLU and GEMM2 for every active expert, and a small combine kernel sums the partial results.
//
// Why: at decode sizes the layer is pure weight streaming, and the four-kernel pipeline (route,
// GEMM1, GEMM2, combine) loses a third of the time to its structure: GEMM2 cannot start streaming
// until GEMM1 has finished, and each kernel boundary drains the memory pipeline (docs/perf-log.md).
// Here the work is cut into units of (expert, 32 intermediate features): a block computes the 64
// GEMM1 rows of a unit (gate and linear of 32 features), applies SwiGLU in shared memory and at once
// multiplies the 32 features into GEMM2's K block of the same index, accumulating GEMM2 partial sums
// in registers. So every weight byte is streamed exactly once, GEMM1 and GEMM2 weights flow through
// one ring without a grid-wide dependency, and no block ever waits for another. Blocks take equal
// contiguous runs of units; each run's partial sums go to the workspace, one slice per (block,
// expert), and the combine kernel adds them in a fixed order (bitwise reproducible).
//
// Status (docs/perf-log.md): correct and tested, but on an H200 still slower than the GEMV path
// (gpt-oss-120b T = 1: 32 us for this kernel alone, 56 us with the combine, against 27.6 us), so it is
// off by default (MXMOE_DECODE_TOKENS=N turns it on up to T = N). It also keeps a second copy of
// GEMM2's weights in the slice layout while on.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace mxmoe::gemv {

inline constexpr int kDecodeMaxTokens = 8;  // rows per expert <= 8: one MMA N

struct DecodeArgs {
  const uint16_t* hidden = nullptr;  // [T, H] bf16
  const float* logits = nullptr;     // [T, E] fp32
  int tokens = 0, experts = 0, top_k = 0;
  bool softmax_first = false, renormalize = false;
  int hidden_size = 0, inter_size = 0;
  const uint8_t* w1 = nullptr;  // GEMV layout (gemv_layout.hpp), rows 2I, K = H
  int64_t w1_stride = 0;
  int chunks1 = 0;
  const uint16_t* b1 = nullptr;  // [E, 2I] bf16 or null
  const uint8_t* w2 = nullptr;   // slice layout (slice_layout.hpp), rows H, K = I
  int64_t w2_stride = 0;
  const uint16_t* b2 = nullptr;  // [E, H] bf16 or null
  float alpha = 1.702f, limit = 7.0f;
  bool wide_scales = false;  // some scale byte of either GEMM is > 128 or 0xFF
  int stages = 4;            // weight ring stages: 4, or 2 where 4 do not fit (decode_supported)
  int grid = 0;              // blocks (decode_grid)
  int max_segments = 0;      // partial slices per block (decode_max_segments)
  float* partials = nullptr;      // [grid, max_segments, T, H] fp32
  int32_t* pair_slot = nullptr;   // [T*k] active-expert slot of pair t*k+s
  int32_t* pair_row = nullptr;    // [T*k] row of the pair within its expert
  float* pair_weight = nullptr;   // [T*k]
  int32_t* slot_expert = nullptr; // [min(E, T*k)]
  int32_t* active_count = nullptr;
  uint16_t* out = nullptr;        // [T, H] bf16
};

// Whether the decode path supports the shape on a device with a ring of `stages` (2 or 4) per warp
// (H <= 3072, K multiples of 32, shared memory).
bool decode_supported(int hidden, int intermediate, int tokens, int stages, size_t smem_per_block_optin);
int decode_grid(int sm_count);
int decode_max_segments(int experts, int top_k, int intermediate, int64_t tokens, int grid);
// Partial-sum floats the workspace needs for T tokens.
size_t decode_partial_floats(int experts, int top_k, int hidden, int intermediate, int64_t tokens, int grid);
// Lets the kernels use the device's opt-in shared memory (idempotent).
void configure_decode(size_t smem_per_block_optin);
// stages: 1 = the fused kernel only, 2 = and the combine (for `mxmoe bench --stages`).
void launch_decode(const DecodeArgs& args, int stages, cudaStream_t stream);

}  // namespace mxmoe::gemv
