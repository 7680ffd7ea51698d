#pragma once
// Hopper's tensor-core family (sm_90a): warpgroup MMAs (wgmma) with the weights on M, decoded from
// e2m1 to bf16 in registers as the other families decode them (the GEMV layout's records, read as
// they are), and 32, 64 or 128 rows of one expert on N, read by the wgmma straight from 128-byte-swizzled
// shared memory. The mma.sync tiles (mma/) leave much of Hopper's tensor rate unused: their B
// fragments pass through registers and every MMA is a warp instruction; a wgmma of 64 x 128 x 16 is
// one instruction per warpgroup and runs while the warps decode the next weights.
//
// Block: 4 warpgroups (16 warps), warp i one 16-row weight tile (256 weight rows per block: each
// staged row of activations feeds 256 weight rows, half the L2 reads of 128; on an H200 faster than
// 128 rows at 2 blocks per SM and than 192 rows with 12 warps: docs/perf-log.md) x
// `rows` rows of an expert, K in chunks of 128 through a ring of 4 stages (3 in the 64-row tile, which
// runs two blocks per SM as the 32-row one does) that one thread fills by tensor copies
// (wgmma_stage.cuh), all but one stage ahead. The activations come in chunk order
// (chunk_order.hpp), rows padded to whole chunks and in sorted row order: GEMM1's from
// to_chunk_order() with the routing's row_pair (the tokens expanded to their rows), GEMM2's from
// GEMM1's epilogue, which writes them so. MmaArgs::k is therefore the padded row length, not K (the
// records' chunk count says how far K goes), and MmaArgs::act holds tokens x top_k rows.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/mma/mma_gemm.hpp"

namespace mxmoe::sm90 {

// The wgmma block: 16 warps (4 warpgroups), one 16-row weight tile each; the bf16 tiles' and the FP8
// tiles' but the 192-row one (12 warps: Fp8Shape::kWarps).
inline constexpr int kBlockWarps = 16;
inline constexpr int kBlockWeightRows = 256;

// Whether this build has the family (a built wgmma row: none in the minimal profile), and whether it
// runs on `device`: a compute capability 9.0 device, a build with sm_90a among its architectures, and
// the shared memory.
bool wgmma_built();
bool wgmma_runs(int device);
// Built and with sm_90a code in this library (what a plan for a Hopper target may use).
bool wgmma_in_build();
// Whether this build has the family's tile of `rows` rows (the tile table's wgmma rows: 32, 64, 128).
bool wgmma_rows_supported(int rows);
size_t wgmma_smem_bytes(int rows);
// Lets the kernels use their dynamic shared memory (idempotent); needs wgmma_runs.
void configure_wgmma();
// GEMM1 (+ bias + SwiGLU -> bf16 intermediate in chunk order, row length padded_k(n / 2)) or GEMM2
// (+ bias, times the routing weight -> bf16 rows). Programmatic dependent launch.
template <bool kGemm1>
void launch_wgmma(const mma::MmaArgs& args, int64_t tokens, int max_active, int rows, cudaStream_t stream);

}  // namespace mxmoe::sm90
