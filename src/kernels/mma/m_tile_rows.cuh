#pragma once
// The start of a Bf16Atom tensor-core block (mma_gemm_kernel.cu, swap_gemm_kernel.cu): wait for the
// predecessors (programmatic dependent launch: the routing and the activations come from them), find
// the block's m-tile, and the element offset of each of its rows' activations (GEMM1: the token's
// row; GEMM2: the row itself; -1 for padding rows). False (the whole block) when x is past the last
// m-tile. Every thread of the block must call it.
#include <cstdint>

#include "kernels/common/cp_async.cuh"
#include "layout/gemv_layout.hpp"
#include "kernels/mma/mma_gemm.hpp"
#include "common/cuda_check.hpp"
#include "common/m_tiles.cuh"

namespace mxmoe::mma {

// Host: the x extent of a tensor-core launch, one block per possible m-tile of block_rows rows (the
// surplus blocks exit in begin_m_tile).
inline unsigned m_tile_blocks(const MmaArgs& a, int64_t tokens, int max_active, int block_rows) {
  const int64_t pairs = tokens * a.top_k;
  const int64_t m_blocks = routing::m_tiles_bound(pairs, max_active, block_rows);
  MXMOE_REQUIRE(m_blocks < (int64_t{1} << 31), "mma: too many rows (", pairs, ")");
  return static_cast<unsigned>(m_blocks);
}

// Waits for the predecessors (unless `wait` is false: see the swap-AB tiles' GEMM2), then finds m-tile
// `x` (false for the whole block when x is past the last one). The wgmma tiles (sm90/) use it directly:
// their tensor copies read an m-tile's rows from its first.
template <int kBlockM>
__device__ __forceinline__ bool find_block_m_tile(const MmaArgs& a, int x, routing::MTile& tile, bool wait = true) {
  if (wait) kernels::pdl_wait();
  kernels::pdl_trigger();
  routing::find_m_tile<kBlockM>(x, a.experts, a.expert_offsets, tile);
  __syncthreads();
  return tile.expert >= 0;
}

template <int kBlockM, bool kGemm1>
__device__ __forceinline__ bool begin_m_tile(const MmaArgs& a, routing::MTile& tile, int64_t (&src_row)[kBlockM],
                                             int x = static_cast<int>(blockIdx.x), bool wait = true) {
  if (!find_block_m_tile<kBlockM>(a, x, tile, wait)) return false;
  if (threadIdx.x < kBlockM) {
    const int r = threadIdx.x, row = tile.row0 + r;
    src_row[r] = r >= tile.rows ? -1 : static_cast<int64_t>(kGemm1 ? a.row_pair[row] / a.top_k : row) * a.k;
  }
  __syncthreads();
  return true;
}

// The rounds of one thread's activation copies: the group at element kk of row r0 + round *
// kRowsPerRound (its element offset from src_row) to `dst` + round * step (a generic pointer or a
// shared-window address). Padding rows (-1) and K past the end (kk >= k) read as zeros.
template <int kBlockM, int kRowsPerRound, class Dst>
__device__ __forceinline__ void copy_act_rounds(const int64_t (&src_row)[kBlockM], int r0, const uint16_t* act, int kk,
                                                int k, Dst dst, int step) {
  const bool in_k = kk < k;
  const uint16_t* src = act + kk;
#pragma unroll 1
  for (int round = 0; round < kBlockM / kRowsPerRound; ++round) {
    const int64_t row = src_row[r0 + round * kRowsPerRound];
    const bool valid = row >= 0 && in_k;
    kernels::cp_async_16(dst + round * step, valid ? src + row : act, valid);
  }
}

// Chunk c of the m-tile's activations (16 groups of 8 bf16 per row) by cp.async, group gr of row r to
// place(r, gr) in shared memory. Padding rows and K past the end read as zeros. Thread i copies group
// i % 16 of rows i / 16 + 16 * round: the group, its K and its place in a row are fixed per thread,
// so a round costs a row lookup and a copy (a walk from threadIdx.x over all groups recomputed them,
// as many instructions as the copies of the weights and activations themselves).
template <int kBlockM, int kThreads, class Place>
__device__ __forceinline__ void load_act_chunk(const MmaArgs& a, const int64_t (&src_row)[kBlockM], int c,
                                               Place&& place) {
  constexpr int kRowsPerRound = kThreads / 16;
  static_assert(kThreads % 16 == 0 && kBlockM % kRowsPerRound == 0, "whole rounds of the block's threads");
  static_assert(kRowsPerRound % 8 == 0, "rounds 8 rows apart: the same place in a row swizzled by row % 8");
  const int gr = threadIdx.x & 15, r0 = threadIdx.x >> 4;
  const int kk = c * gemv::kChunkK + gr * 8;
  uint8_t* dst = place(r0, gr);
  // Rows r and r + kRowsPerRound sit at the same place in their rows (a multiple of 8 rows apart).
  const int step = static_cast<int>(place(r0 + kRowsPerRound, gr) - dst);
  copy_act_rounds<kBlockM, kRowsPerRound>(src_row, r0, a.act, kk, a.k, dst, step);
}

}  // namespace mxmoe::mma
