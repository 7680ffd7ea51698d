#pragma once
// The MX atoms of the tensor-core family: MXFP8 activations (e4m3 + e8m0 per 32) times MXFP4
// weights, one mma.sync m16n8k32 per MX block (mx_fragments.cuh has the register packing).
//   MxEmulatedAtom (SM89/SM90): e4m3 x e4m3 MMA with no scales into a fresh fp32 partial sum, then
//     c += partial * 2^6 * 2^(sa-127) * 2^(sb-127) (the weights are e4m3 bytes worth e2m1 * 2^-6,
//     and every factor is a power of two, applied one at a time so none overflows on its own): the
//     block-scaled MMA of SM120 reproduced, so its data path runs and is tested on Hopper.
//   MxNativeAtom (sm_120a/sm_121a/sm_120f/sm_121f): mma ... kind::mxf8f6f4.block_scale.scale_vec::1X
//     with ue8m0 scales, e2m1 in 8-bit containers. Compiled for those targets only (arch_features.cuh);
//     elsewhere it traps, and the SASS checks fail any SM12x build where it does.
#include <cstdint>

#include "kernels/common/arch_features.cuh"

namespace mxmoe::mma {

// 2^(byte - 127) as a float (byte 0 is the float subnormal 2^-127); 0xFF is NaN.
__device__ __forceinline__ float e8m0_value(uint32_t byte) {
  if (byte == 0xFFu) return __uint_as_float(0x7FC00000u);
  return __uint_as_float(byte == 0 ? 0x00400000u : byte << 23);
}

struct MxEmulatedAtom {
  static constexpr bool kContainers = false;
  // fa_lo, fa_hi: the row scales (rows g, g+8) as floats; fb0, fb1: the column scales (2t, 2t+1).
  static __device__ __forceinline__ void mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                             uint32_t b0, uint32_t b1, float fa_lo, float fa_hi, float fb0, float fb1) {
    float p0 = 0.f, p1 = 0.f, p2 = 0.f, p3 = 0.f;
#if MXMOE_HAS_FP8_MMA_SYNC
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(p0), "+f"(p1), "+f"(p2), "+f"(p3)
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
    __trap();
#endif
    c[0] += p0 * 64.f * fa_lo * fb0;
    c[1] += p1 * 64.f * fa_lo * fb1;
    c[2] += p2 * 64.f * fa_hi * fb0;
    c[3] += p3 * 64.f * fa_hi * fb1;
  }
};

// The emulated atom with a planted fault: each operand's two scales exchanged (rows g and g+8,
// columns 2t and 2t+1), the kind of slip a wrong fragment convention makes. It exists so that a GPU
// test can watch the self-test gate (moe/mx_self_test.hpp) fail and the runner fall back; no plan
// ever chooses it.
struct MxPlantedFaultAtom {
  static constexpr bool kContainers = false;
  static __device__ __forceinline__ void mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                             uint32_t b0, uint32_t b1, float fa_lo, float fa_hi, float fb0, float fb1) {
    MxEmulatedAtom::mma(c, a0, a1, a2, a3, b0, b1, fa_hi, fa_lo, fb1, fb0);
  }
};

struct MxNativeAtom {
  static constexpr bool kContainers = true;
  // sfa, sfb: the scale bytes (byte 0; thread-id-a = thread-id-b = 0) as native_scale_a and
  // native_scale_b_row (mx_fragments.cuh) place them in the lanes.
  static __device__ __forceinline__ void mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                             uint32_t b0, uint32_t b1, uint32_t sfa, uint32_t sfb) {
#if MXMOE_HAS_BLOCK_SCALED_MMA
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X.f32.e4m3.e2m1.f32.ue8m0 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3}, %10, {0, 0}, %11, {0, 0};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(sfa), "r"(sfb));
#else
    (void)c, (void)a0, (void)a1, (void)a2, (void)a3, (void)b0, (void)b1, (void)sfa, (void)sfb;
    __trap();
#endif
  }
};

}  // namespace mxmoe::mma
