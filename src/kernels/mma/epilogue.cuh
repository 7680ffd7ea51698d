#pragma once
// The epilogues of the tensor-core family, shared by its atoms (mma_gemm_kernel.cu, mx_gemm_kernel.cu):
// the accumulators of a warp's 2 weight tiles (4 n8 groups) for kMTiles m16 groups of rows.
// Lane (g, t) holds rows g (fragment 0, 1) and g+8 (2, 3) of each m16 group, weight rows 2t and 2t+1
// of each half of a tile: in GEMM1 the low half holds the gates and the high half the linears of
// features 8*tile + 2t, +1 (gemv_layout.hpp), so the SwiGLU runs in registers.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/gemv/gemv_device.cuh"
#include "layout/gemv_layout.hpp"

namespace mxmoe::mma {

struct EpilogueArgs {
  const uint16_t* bias;  // [E, N] bf16 in checkpoint row order, or null
  int n;                 // output rows per expert in the checkpoint (2I or H)
  const int32_t* row_pair;
  const float* pair_weights;
  void* out;             // GEMM1: bf16 [rows, I]; GEMM2: fp32 [rows, H] (bf16 in store_swap_rows)
  float alpha, limit;
  // GEMM1's fp32 output somewhere else (the MXFP8 epilogue's tile in shared memory): element
  // (row, feature f) at out + row * pitch + f - feature0. pitch 0: the intermediate's (n / 2).
  int64_t pitch = 0;
  int feature0 = 0;
};

// GEMM1: bias + clamped SwiGLU -> bf16 intermediate (fp32 with kF32Intermediate: the MX path
// quantises it to MXFP8 from fp32, as the reference does); GEMM2: bias, times the routing weight -> fp32.
// Rows [row0, row0 + rows) of the sorted order; the warp's weight tiles first_tile, first_tile + 1.
template <bool kGemm1, int kMTiles, bool kF32Intermediate = false>
__device__ __forceinline__ void store_rows(const EpilogueArgs& a, const float (&acc)[kMTiles][2][2][4], int expert,
                                           int64_t row0, int rows, int first_tile, int g, int t) {
#pragma unroll
  for (int i = 0; i < kMTiles; ++i)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = i * 16 + g + 8 * hr;
      if (r >= rows) continue;
      const int64_t row = row0 + r;
      float weight = 1.f;
      if constexpr (!kGemm1) weight = a.pair_weights[a.row_pair[row]];
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const int ti = first_tile + q;
        const float* lo = &acc[i][q][0][2 * hr];
        const float* hi = &acc[i][q][1][2 * hr];
        if constexpr (kGemm1) {
          const int f = ti * 8 + 2 * t;
          float gate0 = lo[0], gate1 = lo[1], lin0 = hi[0], lin1 = hi[1];
          if (a.bias) {
            const uint2 bv = *reinterpret_cast<const uint2*>(a.bias + static_cast<int64_t>(expert) * a.n + 2 * f);
            gate0 += __bfloat162float(__ushort_as_bfloat16(static_cast<uint16_t>(bv.x & 0xFFFFu)));
            lin0 += __bfloat162float(__ushort_as_bfloat16(static_cast<uint16_t>(bv.x >> 16)));
            gate1 += __bfloat162float(__ushort_as_bfloat16(static_cast<uint16_t>(bv.y & 0xFFFFu)));
            lin1 += __bfloat162float(__ushort_as_bfloat16(static_cast<uint16_t>(bv.y >> 16)));
          }
          const float act0 = gemv::swiglu(gate0, lin0, a.alpha, a.limit), act1 = gemv::swiglu(gate1, lin1, a.alpha, a.limit);
          if constexpr (kF32Intermediate)
            *reinterpret_cast<float2*>(static_cast<float*>(a.out) + row * (a.pitch ? a.pitch : a.n / 2) + f -
                                       a.feature0) = make_float2(act0, act1);
          else
            *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(a.out) + row * (a.n / 2) + f) =
                __floats2bfloat162_rn(act0, act1);
        } else {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int col = ti * gemv::kTileRows + 8 * h + 2 * t;
            const float* v = h == 0 ? lo : hi;
            float y0 = v[0], y1 = v[1];
            if (a.bias) {
              const uint32_t bv = *reinterpret_cast<const uint32_t*>(a.bias + static_cast<int64_t>(expert) * a.n + col);
              y0 += __bfloat162float(__ushort_as_bfloat16(static_cast<uint16_t>(bv & 0xFFFFu)));
              y1 += __bfloat162float(__ushort_as_bfloat16(static_cast<uint16_t>(bv >> 16)));
            }
            *reinterpret_cast<float2*>(static_cast<float*>(a.out) + row * a.n + col) = make_float2(y0 * weight, y1 * weight);
          }
        }
      }
    }
}

}  // namespace mxmoe::mma
