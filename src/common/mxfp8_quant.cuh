#pragma once
// fp32 -> MXFP8 of one 32-element block, the CPU reference's quantisation (formats.hpp,
// mx_block.cpp) bit for bit: the scale rule (RCEIL or FLOOR), elements x * 2^-s rounded to nearest
// even and saturated by the hardware e4m3 convert, a non-finite block marked by scale 0xFF with zero
// elements. Shared by the expand step (routing/expand.cu) and GEMM1's MXFP8 epilogue
// (mma/mx_gemm_kernel.cu), so both give the same bytes.
#include <cuda_fp8.h>

#include <cstdint>

namespace mxmoe::kernels {

inline constexpr int kE4m3Emax = 8;  // 448 = 1.75 * 2^8

// The e8m0 byte of a block whose largest magnitude has the float bits `amax` (finite, > 0).
__device__ __forceinline__ uint32_t mxfp8_block_scale(uint32_t amax, bool floor_rule) {
  const int field = static_cast<int>(amax >> 23);
  // A float subnormal amax lies below 2^-126: s <= -126 - 8 + 1, clamped to -127 by either rule.
  if (field == 0) return 0;
  int s = field - 127 - kE4m3Emax;
  if (!floor_rule && (amax & 0x7FFFFFu) > 0x600000u) ++s;  // RCEIL: significand above 448's 1.75
  return static_cast<uint32_t>(max(-127, min(127, s)) + 127);
}

// 2^-(byte - 127) for byte in [0, 254]; byte 254 gives the float subnormal 2^-127.
__device__ __forceinline__ float mxfp8_inverse_scale(uint32_t byte) {
  const uint32_t e = 254u - byte;
  return __uint_as_float(e == 0 ? 0x00400000u : e << 23);
}

// Quantises x[0..31] into 32 e4m3 bytes (out, element order kept) and returns the scale byte.
__device__ __forceinline__ uint32_t quantise_mxfp8_block(const float (&x)[32], bool floor_rule, uint32_t (&out)[8]) {
  // The largest magnitude as float bits (monotone in the magnitude); an exponent of all ones is
  // inf or NaN, and makes the whole block NaN.
  uint32_t amax = 0;
  bool nonfinite = false;
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const uint32_t m = __float_as_uint(x[j]) & 0x7FFFFFFFu;
    amax = max(amax, m);
    nonfinite |= m >= 0x7F800000u;
  }
  if (nonfinite) {
#pragma unroll
    for (int j = 0; j < 8; ++j) out[j] = 0;
    return 0xFFu;
  }
  const uint32_t byte = amax == 0 ? 0u : mxfp8_block_scale(amax, floor_rule);
  const float inv = mxfp8_inverse_scale(byte);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    // Elements 4j..4j+3 -> four e4m3 bytes.
    const uint32_t b0 = __nv_cvt_float2_to_fp8x2(make_float2(x[4 * j] * inv, x[4 * j + 1] * inv), __NV_SATFINITE, __NV_E4M3);
    const uint32_t b1 = __nv_cvt_float2_to_fp8x2(make_float2(x[4 * j + 2] * inv, x[4 * j + 3] * inv), __NV_SATFINITE, __NV_E4M3);
    out[j] = (b0 & 0xFFFFu) | (b1 << 16);
  }
  return byte;
}

}  // namespace mxmoe::kernels
