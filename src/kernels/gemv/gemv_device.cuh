#pragma once
// Device pieces of the GEMV kernels (gemv_kernel.cu, gemv_block.cuh), some shared with the tensor-core
// tiles: the staged activation layout, one K = 128 chunk of a 16-row tile, SwiGLU.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/common/mma_bf16.cuh"
#include "layout/mx_decode.cuh"
#include "kernels/common/shared_load.cuh"
#include "layout/gemv_layout.hpp"

namespace mxmoe::gemv {

// Bytes of one staged activation row: 128-byte aligned plus 64, so the 8 rows read by one
// quarter-warp land in different banks.
__host__ __device__ constexpr int act_row_stride(int chunks) { return chunks * kChunkK * 2 + 64; }
__host__ __device__ constexpr int act_bytes(int chunks, int rows_cap) {
  return (rows_cap * act_row_stride(chunks) + 127) / 128 * 128;
}

// The staged activation layout: each group of 8 elements (16 bytes) permuted to the decode pair
// order (3,7,2,6,1,5,0,4), and each chunk's groups ordered (word, block), as mma_chunk reads them.
// Groups past K are zeroed (they meet zero weights; garbage there could be NaN). kCoherent: the row
// may be written by a kernel still running (programmatic dependent launch), so read it past the
// non-coherent path (ld.global.cg), not with __ldg.
template <bool kCoherent>
__device__ __forceinline__ uint4 load_act_group(const uint16_t* src_row, int group, int k) {
  const int k0 = group * 8;
  const uint4* p = reinterpret_cast<const uint4*>(src_row + k0);
  return k0 >= k ? make_uint4(0, 0, 0, 0) : kCoherent ? __ldcg(p) : __ldg(p);
}
__device__ __forceinline__ uint4 permute_act_group(const uint4 x) {
  uint4 y;
  y.x = __byte_perm(x.y, x.w, 0x7632);  // (e3, e7)
  y.y = __byte_perm(x.y, x.w, 0x5410);  // (e2, e6)
  y.z = __byte_perm(x.x, x.z, 0x7632);  // (e1, e5)
  y.w = __byte_perm(x.x, x.z, 0x5410);  // (e0, e4)
  return y;
}
// Byte offset of group g (= chunk*16 + block*4 + word) in a staged row: chunk*256 + (word*4 + block)*16.
__device__ __forceinline__ int staged_group_offset(int g) {
  const int chunk = g >> 4, block = (g >> 2) & 3, word = g & 3;
  return chunk * (kChunkK * 2) + (word * 4 + block) * 16;
}

// The bf16x2 multipliers of one e8m0 scale byte (mx_decode.cuh): m always, h only for kWideScales
// (scale bytes above 128 or 0xFF may occur; the upload picks it only when the layer has such a byte).
template <bool kWideScales>
__device__ __forceinline__ void scale_multipliers(uint32_t s, uint32_t& m, uint32_t& h) {
  if constexpr (kWideScales) {
    m = kernels::scale_multiplier(s);
    h = s > 128u && s != 0xFFu ? kernels::scale_multiplier_high(s) : 0x3F803F80u;
  } else {
    m = kernels::scale_multiplier_fast(s);
    h = 0x3F803F80u;
  }
}

template <bool kWideScales>
__device__ __forceinline__ uint32_t apply_scale(uint32_t v, uint32_t m, uint32_t h) {
  v = kernels::bf16x2_mul(v, m);
  if constexpr (kWideScales) v = kernels::bf16x2_mul(v, h);
  return v;
}

// The lane's share of one chunk record in shared memory (gemv_layout.hpp): the 16 bytes of each of its
// two tile rows' MX block and their two scale bytes.
struct ChunkWords {
  uint4 lo, hi;
  uint32_t scales;
};
__device__ __forceinline__ ChunkWords load_chunk_words(uint32_t record, int lane) {
  const uint32_t data = record + lane_data_offset(lane);
  return {kernels::ld_shared_v4(data), kernels::ld_shared_v4(data + kRecordHalfBytes),
          kernels::ld_shared_u16(record + lane_scale_offset(lane))};
}

// One chunk (K = 128) of one 16-row tile (gemv_layout.hpp) against kNb groups of 8 activation rows
// (MMA N = 8 each): the weights are decoded once and feed 8 * kNb MMAs. Group n's B fragments come
// from shared address b_rows[n] + offset; each group accumulates into two chains (by word parity), so
// a column's sum runs in the same order whatever kNb is: a row gets the same bits from every batch width.
template <bool kWideScales, int kNb>
__device__ __forceinline__ void mma_chunk(const ChunkWords& words, const uint32_t (&b_rows)[kNb], uint32_t offset,
                                          float (&acc)[2][kNb][4]) {
  uint32_t m_lo, m_hi, h_lo, h_hi;
  scale_multipliers<kWideScales>(words.scales & 0xFFu, m_lo, h_lo);
  scale_multipliers<kWideScales>((words.scales >> 8) & 0xFFu, m_hi, h_hi);
  const uint32_t words_lo[4] = {words.lo.x, words.lo.y, words.lo.z, words.lo.w};
  const uint32_t words_hi[4] = {words.hi.x, words.hi.y, words.hi.z, words.hi.w};
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    uint32_t lo[4], hi[4];
    kernels::decode_e2m1x8_packed(words_lo[w], lo);
    kernels::decode_e2m1x8_packed(words_hi[w], hi);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      lo[j] = apply_scale<kWideScales>(lo[j], m_lo, h_lo);
      hi[j] = apply_scale<kWideScales>(hi[j], m_hi, h_hi);
    }
#pragma unroll
    for (int n = 0; n < kNb; ++n) {
      const uint4 b = kernels::ld_shared_v4(b_rows[n] + offset + w * 64);
      kernels::mma_m16n8k16_bf16(acc[w & 1][n], lo[0], hi[0], lo[1], hi[1], b.x, b.y);
      kernels::mma_m16n8k16_bf16(acc[w & 1][n], lo[2], hi[2], lo[3], hi[3], b.z, b.w);
    }
  }
}

__device__ __forceinline__ float swiglu(float gate, float linear, float alpha, float limit) {
  gate = fminf(gate, limit);
  linear = fminf(fmaxf(linear, -limit), limit);
  return gate / (1.f + __expf(-alpha * gate)) * (linear + 1.f);
}

}  // namespace mxmoe::gemv
