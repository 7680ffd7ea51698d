#pragma once
// The epilogues of the tiles with the weights on the MMA's M side: the swap-AB tiles
// (swap_gemm_kernel.cu, a warp's 2 weight tiles) and Hopper's wgmma tiles (sm90/, 1 per warp), kNb n8
// groups of rows on N. Lane (g, t) holds, per tile and group, weight rows g (fragment 0, 1) and g+8
// (2, 3) for the rows 2t and 2t+1 of the group. In GEMM1 tile rows 0-7 are the gates and 8-15 the
// linears of features 8*tile + g (gemv_layout.hpp): the SwiGLU runs in registers, as in the GEMV
// family, which has the same fragment layout. GEMM1 writes the intermediate in the order its GEMM2
// tile reads: store1(row, feature, value) stores one element (bf16_intermediate: a bf16 element at
// index(row, feature), the swap tiles' permute_words.hpp pair order or the wgmma tiles'
// sm90/chunk_order.hpp; the W4A8 tiles an e4m3 byte). GEMM2 writes bf16 rows (routing::combine_bf16_rows).
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/gemv/gemv_device.cuh"
#include "layout/gemv_layout.hpp"
#include "kernels/mma/epilogue.cuh"

namespace mxmoe::mma {

__device__ __forceinline__ float bf16_at(const uint16_t* p) { return __bfloat162float(__ushort_as_bfloat16(*p)); }

// GEMM1's bf16 intermediate: element (row, feature) at out[index(row, feature)].
template <class Index>
__device__ __forceinline__ auto bf16_intermediate(void* out, Index index) {
  return [out = static_cast<__nv_bfloat16*>(out), index](int64_t row, int f, float v) {
    out[index(row, f)] = __float2bfloat16_rn(v);
  };
}

// Rows [row0, row0 + rows) of the sorted order; the warp's kTiles tiles from first_tile; its groups
// from n0. bias_at(tile, j): element j (0..15) of the tile's 16 bias rows; row_weight(r): the routing
// weight of row row0 + r (GEMM2). The wgmma tiles stage both in shared memory before their main loop,
// so no memory round trip sits on a block's tail.
template <bool kGemm1, int kTiles, int kNb, class Gemm1Store, class BiasAt, class RowWeight>
__device__ __forceinline__ void store_swap_rows(const EpilogueArgs& a, const float (&acc)[kTiles][kNb][4], int64_t row0,
                                                int rows, int first_tile, int n0, int g, int t, Gemm1Store&& store1,
                                                BiasAt&& bias_at, RowWeight&& row_weight) {
#pragma unroll
  for (int q = 0; q < kTiles; ++q) {
    const int ti = first_tile + q;
    // GEMM1: gate and linear of feature f sit at checkpoint rows 2f, 2f+1; GEMM2: columns col, col+8.
    const int f = ti * 8 + g, col = ti * gemv::kTileRows + g;
    const float bias0 = bias_at(ti, kGemm1 ? 2 * g : g), bias1 = bias_at(ti, kGemm1 ? 2 * g + 1 : g + 8);
#pragma unroll
    for (int n = 0; n < kNb; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int r = (n0 + n) * 8 + 2 * t + e;
        if (r >= rows) continue;
        const int64_t row = row0 + r;
        const float y0 = acc[q][n][e] + bias0, y1 = acc[q][n][2 + e] + bias1;
        if constexpr (kGemm1) {
          store1(row, f, gemv::swiglu(y0, y1, a.alpha, a.limit));
        } else {
          // bf16 rows: the combine sums them in fp32 (routing::combine_bf16_rows); half the bytes of
          // fp32 rows written here and read there (at T = 1024 about 24 MB each way on gpt-oss-120b).
          const float weight = row_weight(r);
          __nv_bfloat16* out = static_cast<__nv_bfloat16*>(a.out) + row * a.n + col;
          out[0] = __float2bfloat16_rn(y0 * weight);
          out[8] = __float2bfloat16_rn(y1 * weight);
        }
      }
  }
}

// The same, the bias and routing weights read from global memory.
template <bool kGemm1, int kTiles, int kNb, class Gemm1Store>
__device__ __forceinline__ void store_swap_rows(const EpilogueArgs& a, const float (&acc)[kTiles][kNb][4], int expert,
                                                int64_t row0, int rows, int first_tile, int n0, int g, int t,
                                                Gemm1Store&& store1) {
  const uint16_t* bias = a.bias ? a.bias + static_cast<int64_t>(expert) * a.n : nullptr;
  store_swap_rows<kGemm1>(
      a, acc, row0, rows, first_tile, n0, g, t, store1,
      [bias](int ti, int j) { return bias ? bf16_at(bias + ti * gemv::kTileRows + j) : 0.f; },
      [&a, row0](int r) { return a.pair_weights[a.row_pair[row0 + r]]; });
}

}  // namespace mxmoe::mma
