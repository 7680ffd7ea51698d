#pragma once
// Bf16Atom (SM80+, W4A16): the weights' B fragments decoded from e2m1 to bf16 in registers and
// multiplied by their e8m0 scale (exact), then one m16n8k16 bf16 MMA with fp32 accumulation. The
// other atoms of the family (MX emulated on SM89/SM90, native block-scaled on SM120a/121a) take the
// same place in mma_gemm_kernel.cu.
#include <cstdint>

#include "kernels/common/mma_bf16.cuh"
#include "layout/mx_decode.cuh"
#include "kernels/gemv/gemv_device.cuh"

namespace mxmoe::mma {

template <bool kWideScales>
struct Bf16Atom {
  // The multipliers of one e8m0 scale byte (gemv_device.cuh).
  struct Scale {
    uint32_t m, h;
  };
  static __device__ __forceinline__ Scale scale(uint32_t byte) {
    Scale s;
    gemv::scale_multipliers<kWideScales>(byte, s.m, s.h);
    return s;
  }

  // One stored weight word (8 e2m1 of one MX block, bit-scattered: pack_e2m1x8) -> its 4 bf16x2
  // pairs in the decode order (elements (3,7), (2,6), (1,5), (0,4) of the word), scaled.
  static __device__ __forceinline__ void decode(uint32_t word, Scale s, uint32_t (&pairs)[4]) {
    kernels::decode_e2m1x8_packed(word, pairs);
#pragma unroll
    for (int j = 0; j < 4; ++j) pairs[j] = gemv::apply_scale<kWideScales>(pairs[j], s.m, s.h);
  }

  // c += A (16 x 16, rows g and g+8, K slots 2t.., 2t+8..) x B (16 x 8, column g).
  static __device__ __forceinline__ void mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                             uint32_t b0, uint32_t b1) {
    kernels::mma_m16n8k16_bf16(c, a0, a1, a2, a3, b0, b1);
  }
};

}  // namespace mxmoe::mma
