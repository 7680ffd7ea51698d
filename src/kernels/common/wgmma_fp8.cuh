#pragma once
// Hopper's warpgroup MMA with e4m3 operands (sm_90a only; PTX ISA, "Asynchronous Warpgroup Level Matrix
// Multiply-Accumulate Instructions"): m64nNk32, f32 accumulators, A (64 x 32 e4m3) from registers and B
// (N x 32 e4m3, K-major) from shared memory through a matrix descriptor (wgmma.cuh builds it: a K step
// of 32 bytes of a 128-byte-swizzled line, as the bf16 form's 16 elements).
//
// A: warp i of the warpgroup holds rows 16i..16i+15; lane (g, t): a0 = row g K 4t..4t+3 (byte j = K
// 4t + j), a1 = row g+8 the same, a2 = row g K 16+4t..16+4t+3, a3 = row g+8 the same.
// D: as the bf16 form's (wgmma.cuh). The 8-bit forms take no transpose operands: B is K-major.
#include <cstdint>

#include "kernels/common/arch_features.cuh"
#include "kernels/common/wgmma.cuh"

namespace mxmoe::kernels {

// D (64 x N, fp32) += A (64 x 32 e4m3, registers) x B (N rows x 32 of K, e4m3, shared memory through
// `desc`), by the whole warpgroup (wgmma.cuh's template). N: 8 to 64 in steps of 8, 96, 128 to 192 in
// steps of 8.
template <int kN>
__device__ __forceinline__ void wgmma_rs_e4m3(float (&d)[kN / 2], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                              uint64_t desc) {
#if MXMOE_HAS_WGMMA
  MXMOE_WGMMA_RS_WIDTHS("k32.f32.e4m3.e4m3", "");
#else
  (void)d, (void)a0, (void)a1, (void)a2, (void)a3, (void)desc;
  __trap();
#endif
}

}  // namespace mxmoe::kernels
