#pragma once
// Hopper's FP8 (W4A8) tensor-core family (sm_90a; docs/fp8.md, reference/fp8_model.hpp): the bf16 wgmma
// tiles' shape (wgmma_gemm.hpp: 16 warps, one 16-row weight tile each = 256 weight rows on M; the 192-row
// tile: 12 warps, 192 weight rows), 32, 64, 128 or 192 rows of one expert on N, K in chunks of 128 through
// a ring of tensor-copy stages) with e4m3 operands, one m64nNk32 wgmma per K step of 32:
// - weights: the GEMV layout's records as they are, each MXFP4 element decoded in registers to the e4m3
//   byte of m x 2^(x - c) (layout/fp8_decode.cuh), c the row's exponent (layout/fp8_row_exponents.hpp);
// - activations: e4m3 rows in fp8_chunk_order.hpp's order, one 128-byte line per row and chunk: GEMM1's
//   with one fp32 scale per token (quantize_tokens_e4m3, expanded to the sorted rows), GEMM2's with one
//   static scale for every row (GEMM1 writes them: below);
// - epilogue: acc x 2^c[row] x the row's activation scale, then the bf16 family's (bias and clamped
//   SwiGLU -> GEMM1's e4m3 intermediate e4m3(y x out_scale), in the activation order with row pitch
//   padded_k(N / 2) and zeros past N / 2, which GEMM2 reads as it is at act_scale = 1 / out_scale; bias
//   and routing weight -> GEMM2's bf16 rows for the combine).
// MmaArgs::act is the e4m3 rows (as bytes: reinterpret_cast<const uint16_t*>), MmaArgs::k their padded
// row length in bytes (padded_k(K)); MmaArgs::half_tail and wide_scales are not read (fp8_chunk_order.hpp
// and fp8_decode.cuh say why).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/mma/mma_gemm.hpp"

namespace mxmoe::sm90 {

struct Fp8Operands {
  const int8_t* row_exponents = nullptr;  // [E][N] in checkpoint row order (fp8_row_exponents)
  const float* act_scales = nullptr;      // GEMM1: [sorted rows], one scale per row (quantize_tokens_e4m3's)
  float act_scale = 0.f;                  // GEMM2: every row's scale (1 / GEMM1's out_scale)
  float out_scale = 0.f;                  // GEMM1: its e4m3 output's power-of-two scale (fp8::gemm2_input_scale)
};

// Split-K across a thread-block cluster (split_k.cuh): at most this many blocks share a tile set's K (the
// portable cluster size), in the 32-row tile only (the planner splits where blocks leave SMs idle: decode
// sizes, where that tile runs).
inline constexpr int kMaxSplits = 8;
inline constexpr int kSplitRows = 32;
constexpr bool wgmma_fp8_splits_built(int rows) { return rows == kSplitRows; }
// Resident blocks per SM of the `rows`-row tile (its launch bound): two up to 64 rows, one from 128.
constexpr int wgmma_fp8_blocks_per_sm(int rows) { return rows <= 64 ? 2 : 1; }

// Whether this build has the family's tile of `rows` rows (the tile table's WgmmaFp8 rows: 32, 64, 128, 192),
// its dynamic shared memory, and whether the family runs on `device` (as wgmma_runs).
bool wgmma_fp8_rows_supported(int rows);
size_t wgmma_fp8_smem_bytes(int rows);
bool wgmma_fp8_runs(int device);
// Lets the kernels use their dynamic shared memory (idempotent); needs wgmma_fp8_runs.
void configure_wgmma_fp8();
// GEMM1 (+ bias + SwiGLU -> e4m3 intermediate [rows, padded_k(n / 2)] bytes, GEMM2's input) or GEMM2
// (+ bias, times the routing weight -> bf16 rows). `splits` blocks share each tile set's K (1: none; the plan's).
// Programmatic dependent launch.
template <bool kGemm1>
void launch_wgmma_fp8(const mma::MmaArgs& args, const Fp8Operands& fp8, int64_t tokens, int max_active, int rows,
                      int splits, cudaStream_t stream);

}  // namespace mxmoe::sm90
