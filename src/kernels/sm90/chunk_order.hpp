#pragma once
// The activation order of Hopper's wgmma tiles (wgmma_gemm.hpp). A wgmma reads B (the activations)
// from shared memory in plain K order, 16 per instruction, while the A fragments come from the GEMV
// layout's records (gemv_layout.hpp): in K step s, lane (g, q) holds MX block q of the chunk, its
// decoded pairs (mma/bf16_atom.cuh) 2h and 2h+1 of word w, where s = 2w + h. So each 128-element
// chunk of a row is stored with element k = 32q + 8w + e at
//   ((4w + p) * 4 + q) * 2 + i,   p, i = mma::permuted_position(e) / 2, % 2
// (K step s then reads stored elements 16s .. 16s + 15), and rows are padded to whole chunks with
// zeros: the records' blocks past K are zero weights, which must not meet stale NaNs.
#include <cuda_runtime.h>

#include <cstdint>

#include "layout/gemv_layout.hpp"
#include "kernels/mma/permute_words.hpp"

namespace mxmoe::sm90 {

// A row of K elements padded to whole chunks.
constexpr int64_t padded_k(int64_t k) { return (k + gemv::kChunkK - 1) / gemv::kChunkK * gemv::kChunkK; }

// The stored position of element k (0..127) of a chunk.
constexpr int chunk_position(int k) {
  const int q = k >> 5, w = (k >> 3) & 3, pp = mma::permuted_position(k & 7);
  return ((4 * w + (pp >> 1)) * 4 + q) * 2 + (pp & 1);
}
static_assert(chunk_position(3) == 0 && chunk_position(7) == 1 && chunk_position(35) == 2 &&
                  chunk_position(99) == 6 && chunk_position(2) == 8 && chunk_position(8 + 3) == 32,
              "K step 0: pair (3,7) of blocks 0..3, then pair (2,6); word 1 from element 32");

// When K % 128 == 64 (gpt-oss: K = 2880), a row's last chunk holds two MX blocks, and the wgmma tiles
// run it as a half chunk: 4 K steps over stored elements 0..63, in which lane q holds block q / 2, words
// 2 (q % 2) and 2 (q % 2) + 1 (K step s = 2j + h: decoded pairs 2h, 2h + 1 of the lane's word j), so no
// MMA, decode or copy touches the padding. Stored elements 64..127 are the padding, in place.
constexpr bool half_tail(int64_t k) { return k % gemv::kChunkK == gemv::kChunkK / 2; }
constexpr int tail_position(int k) {
  if (k >= gemv::kChunkK / 2) return k;
  const int b = k >> 5, w = (k >> 3) & 3, pp = mma::permuted_position(k & 7);
  return 32 * (w & 1) + 8 * (pp >> 1) + 2 * (2 * b + (w >> 1)) + (pp & 1);
}
static_assert(tail_position(3) == 0 && tail_position(7) == 1 && tail_position(19) == 2 && tail_position(35) == 4 &&
                  tail_position(11) == 32 && tail_position(64) == 64,
              "half chunk, K step 0: pair (3,7) of block 0's words 0 and 2, then block 1's");

// The stored position of element k of a whole row of K elements (chunk by chunk; the half chunk last).
constexpr int row_position(int k, int64_t row_k) {
  const int chunk = k & ~(gemv::kChunkK - 1), in_chunk = k & (gemv::kChunkK - 1);
  const bool tail = half_tail(row_k) && chunk == static_cast<int>(row_k & ~int64_t{gemv::kChunkK - 1});
  return chunk + (tail ? tail_position(in_chunk) : chunk_position(in_chunk));
}

// out [rows, padded_k(k)] = in [rows, k] in chunk order, zeros past k; 16-byte aligned buffers. With
// row_pair (the routing's sorted row -> pair), out row r is in row row_pair[r] / top_k instead: the
// tokens expanded to their sorted rows, as the wgmma tiles' tensor copies read GEMM1's input; with
// live_rows too (device, the routing's row count expert_offsets[E]), rows from *live_rows on are left
// as they are (dropped pairs make fewer rows than T * k, and their row_pair entries are stale).
// Launched with programmatic dependent launch (it waits for its predecessor before reading).
void to_chunk_order(const uint16_t* in, uint16_t* out, int64_t rows, int k, cudaStream_t stream,
                    const int32_t* row_pair = nullptr, int top_k = 1, const int32_t* live_rows = nullptr);

}  // namespace mxmoe::sm90
