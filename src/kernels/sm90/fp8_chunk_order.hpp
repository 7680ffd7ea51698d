#pragma once
// The activation order of Hopper's FP8 (W4A8) wgmma tiles (wgmma_fp8_gemm.hpp): e4m3 bytes, one
// 128-byte line per row and K chunk of 128, so a stage holds one 128-byte-swizzled line per row and one
// tensor copy box of {128 bytes, rows} fills it.
//
// A wgmma m64nNk32 with e4m3 A in registers takes, in lane (g, t), a0 = row g K slots 4t..4t+3, a1 = row
// g+8 the same, a2 = row g slots 16+4t..16+4t+3, a3 = row g+8 the same (the PTX ISA's register fragment
// for 8-bit A at K = 32; CUTLASS's SM90 64x32 8-bit A layout says the same). In K step s (0..3) of a
// chunk lane (g, t) holds word s of MX block t of its rows (gemv_layout.hpp), decoded by fp8_decode.cuh
// into two registers: bytes [e0, e3, e1, e2] (a0 / a1) and [e4, e7, e5, e6] (a2 / a3) of the word's
// elements e0..e7. So element k = 32q + 8w + e of a chunk is stored at byte
//   32w + 16 (e / 4) + 4q + kFp8Byte[e % 4]
// (K step s reads bytes 32s .. 32s + 31 of the line). Rows are padded to whole chunks with zeros.
//
// K % 128 == 64 (gpt-oss: K = 2880): the last chunk is run as a whole one. Its blocks 2 and 3 are the
// records' padding blocks (zero weights, scale 127) and the activations' zeros past K, so they add
// nothing; the copy and MMA work past K is 2.2% at K = 2880 (the bf16 tiles' half chunk saves it, at
// the price of a second record map and a second chunk body).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/sm90/chunk_order.hpp"

namespace mxmoe::sm90 {

// The byte within a decoded register of element e % 4 of a word (fp8_decode.cuh's order).
constexpr int fp8_byte_of(int e) { return e == 0 ? 0 : e == 3 ? 1 : e == 1 ? 2 : 3; }

// The stored byte of element k (0..127) of a chunk.
constexpr int fp8_chunk_position(int k) {
  const int q = k >> 5, w = (k >> 3) & 3, e = k & 7;
  return 32 * w + 16 * (e >> 2) + 4 * q + fp8_byte_of(e & 3);
}
static_assert(fp8_chunk_position(0) == 0 && fp8_chunk_position(3) == 1 && fp8_chunk_position(1) == 2 &&
                  fp8_chunk_position(2) == 3 && fp8_chunk_position(32) == 4 && fp8_chunk_position(4) == 16 &&
                  fp8_chunk_position(7) == 17 && fp8_chunk_position(8) == 32 && fp8_chunk_position(127) == 127 - 2,
              "K step 0: word 0 of blocks 0..3 (e0, e3, e1, e2 each), then their e4, e7, e5, e6; word 1 from byte 32");

// The stored byte of element k of a row of K elements (chunk by chunk; no half chunk).
constexpr int64_t fp8_row_position(int64_t k) {
  return (k & ~int64_t{gemv::kChunkK - 1}) + fp8_chunk_position(static_cast<int>(k & (gemv::kChunkK - 1)));
}

// GEMM1's input: bf16 token rows -> e4m3 rows in the order above with one fp32 scale per row, as
// fp8::row_round_trip (reference/fp8_model.hpp) quantises: scale = amax / 448, each element
// float_to_e4m3(x / scale); a row of zeros gets scale 0 and zero codes; a row with a NaN or inf gets scale
// NaN and codes 0x7F (NaN). Token t (a row of `in`, [tokens, in_pitch]: the first k elements read; k and
// in_pitch multiples of 8, `in` 16-byte aligned) is quantised once and written to each of its sorted rows
// pair_row[t * top_k + j] (the routing's; -1, a dropped pair, is skipped), as GEMM1's tiles read them:
// out [sorted rows, padded_k(k)] bytes (zeros past k, 16-byte aligned), scales [sorted rows]. Launched
// with programmatic dependent launch. (GEMM2's input needs no pass: GEMM1's epilogue writes it.)
void quantize_tokens_e4m3(const uint16_t* in, int64_t in_pitch, uint8_t* out, float* scales, int64_t tokens, int k,
                          const int32_t* pair_row, int top_k, cudaStream_t stream);

}  // namespace mxmoe::sm90
