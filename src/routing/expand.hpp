#pragma once
// The expand step for block-scaled GEMMs (ARCHITECTURE.md data flow, step 3): every routed row's
// activations gathered in the sorted (expert, token, slot) order, quantised bf16 -> MXFP8 (e4m3
// elements, one e8m0 scale per 32) and written with the scales in the 128x4 swizzled layout
// (FACTS.md §4), in one pass: no standalone quantisation kernel.
//
// Each active expert's rows start at a multiple of 128 in the output: expert j's padded rows begin
// at 128 x (the m-tiles of 128 rows of the experts before it; common/m_tiles.cuh), so the scales of
// all experts form one swizzled matrix whose per-expert parts are the matrices of FACTS.md §4
// (grouped_scale_offsets gives the same offsets). Padding rows are written: codes 0, scales 0; so are
// the padding k-blocks' scales.
#include <cuda_runtime.h>

#include <cstdint>

#include "mxmoe/formats.hpp"
#include "routing/routing.hpp"

namespace mxmoe::routing {

struct ExpandArgs {
  const void* act = nullptr;      // activations, bf16 (or fp32 with f32): [T, K] tokens (gather) or
                                  // [rows, K] sorted rows
  bool f32 = false;               // fp32 input (the MX path's GEMM1 output), else bf16
  bool gather = true;             // true: row r reads token row_pair[r] / top_k; false: row r itself
  int k = 0;                      // K, a multiple of 32
  int top_k = 1;
  int experts = 0;                // E: the routing's expert_offsets hold E + 1
  ScaleRule rule = ScaleRule::Rceil;
  uint8_t* codes = nullptr;       // [padded rows, K] e4m3
  uint8_t* scales = nullptr;      // swizzled, expand_scale_bytes of them
};

// Upper bounds of the padded rows (and so of the buffers) for `pairs` routed rows over at most
// `max_active` experts.
int64_t expand_padded_rows(int64_t pairs, int64_t max_active);
inline int64_t expand_code_bytes(int64_t pairs, int64_t max_active, int k) { return expand_padded_rows(pairs, max_active) * k; }
int64_t expand_scale_bytes(int64_t pairs, int64_t max_active, int k);

void expand_mxfp8(const ExpandArgs& args, const RoutingBuffers& routing, int64_t tokens, int max_active,
                  cudaStream_t stream);

}  // namespace mxmoe::routing
