#pragma once
// e2m1 -> bf16 in registers, and the e8m0 block scale as a bf16x2 multiplier.
//
// A nibble s|e1 e0|m placed as bf16 bits s<<15 | e1e0m<<6 is the e2m1 value times 2^-126 exactly
// (the e = 0 code 0.5 lands on the bf16 subnormal 2^-127). Multiplying by 2^(scale-1) in bf16
// (subnormals are kept by bf16 arithmetic) gives value * 2^(scale-127) exactly.
#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>

// The integer parts are host-callable too, so the CPU tests check them.
#if defined(__CUDACC__)
#define MXMOE_HD __host__ __device__ __forceinline__
#else
#define MXMOE_HD inline
#endif

namespace mxmoe::kernels {

// Four bf16x2 from one 32-bit word of 8 nibbles (elements 0..7, element i in bits 4i..4i+3), in the
// pair order (3,7), (2,6), (1,5), (0,4): low half = first element of each pair.
MXMOE_HD void decode_e2m1x8(uint32_t q, uint32_t (&out)[4]) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t s = q << (4 * j);
    out[j] = (s & 0x80008000u) | ((s & 0x70007000u) >> 6);
  }
}

// The upload stores each 32-bit word of 8 nibbles in a scattered bit order (pack_e2m1x8) that the
// kernels decode in 8 integer instructions instead of ~16: pairs 0, 1, 2 are one mask of the word
// rotated by 0, 26 and 29 bits, and pair 3 is the four remaining bits of each half moved by one
// multiply (shifts 3, 8 and 14 whose copies never overlap, so no carry) and a mask. The result is
// exactly decode_e2m1x8 of the natural word. Bit positions of element 3-j (low half) and 7-j (high
// half) of pair j, as (m, e0, e1, s) = nibble bits 0..3:
inline constexpr int kPackedBit[4][2][4] = {
    {{6, 7, 8, 15}, {22, 23, 24, 31}},
    {{12, 13, 14, 21}, {28, 29, 30, 5}},
    {{9, 10, 11, 18}, {25, 26, 27, 2}},
    {{3, 4, 0, 1}, {19, 20, 16, 17}},
};

// Natural word (element i in bits 4i..4i+3) -> packed word.
MXMOE_HD uint32_t pack_e2m1x8(uint32_t q) {
  uint32_t out = 0;
  for (int j = 0; j < 4; ++j)
    for (int h = 0; h < 2; ++h)
      for (int b = 0; b < 4; ++b) out |= ((q >> (4 * (3 - j + 4 * h) + b)) & 1u) << kPackedBit[j][h][b];
  return out;
}
// Every 32-bit word of `words` little-endian words at `bytes` through pack(word) (upload, host):
// pack_e2m1x8, or a W4A8 record's order (fp8_decode.cuh).
template <class Pack>
inline void pack_e2m1_words(uint8_t* bytes, int64_t words, Pack&& pack) {
  for (int64_t w = 0; w < words; ++w) {
    uint32_t word;
    std::memcpy(&word, bytes + 4 * w, 4);
    word = pack(word);
    std::memcpy(bytes + 4 * w, &word, 4);
  }
}

// Packed word -> natural word (the inverse, for tests and tools).
MXMOE_HD uint32_t unpack_e2m1x8(uint32_t p) {
  uint32_t out = 0;
  for (int j = 0; j < 4; ++j)
    for (int h = 0; h < 2; ++h)
      for (int b = 0; b < 4; ++b) out |= ((p >> kPackedBit[j][h][b]) & 1u) << (4 * (3 - j + 4 * h) + b);
  return out;
}

MXMOE_HD uint32_t rotate_left(uint32_t x, int r) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_l(x, x, r);
#else
  return (x << r) | (x >> (32 - r));
#endif
}

// decode_e2m1x8 of the natural word, from its packed form.
MXMOE_HD void decode_e2m1x8_packed(uint32_t p, uint32_t (&out)[4]) {
  constexpr uint32_t kField = 0x81C081C0u;  // bf16 bits 15 (sign) and 8..6 (e1 e0 m), both halves
  out[0] = p & kField;
  out[1] = rotate_left(p, 26) & kField;
  out[2] = rotate_left(p, 29) & kField;
  out[3] = ((p & 0x001B001Bu) * 0x4108u) & kField;
}

// bf16x2 multiplier for an e8m0 scale byte, to be applied to decode_e2m1x8 output. For scale <= 128
// one multiply suffices; above that the caller applies scale_multiplier_high too. 0xFF gives NaN.
MXMOE_HD uint32_t scale_multiplier(uint32_t scale) {
  if (scale == 0xFFu) return 0x7FC07FC0u;
  const uint32_t exp_field = scale <= 128u ? scale + 126u : 254u;  // 2^(scale-1), capped at 2^127
  const uint32_t bits = exp_field << 7;
  return bits | (bits << 16);
}
// Second factor for scale > 128: 2^(scale-128), so that 2^127 * 2^(scale-128) = 2^(scale-1).
MXMOE_HD uint32_t scale_multiplier_high(uint32_t scale) {
  const uint32_t bits = (scale - 1u) << 7;
  return bits | (bits << 16);
}

// The fast-path multiplier (scale <= 128): bf16x2 of 2^(scale-1) in one integer multiply.
MXMOE_HD uint32_t scale_multiplier_fast(uint32_t scale) { return (scale + 126u) * 0x00800080u; }

#if defined(__CUDACC__)
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  __nv_bfloat162 r = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&a), *reinterpret_cast<const __nv_bfloat162*>(&b));
  return *reinterpret_cast<uint32_t*>(&r);
}
#endif

}  // namespace mxmoe::kernels
