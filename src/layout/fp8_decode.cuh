#pragma once
// e2m1 -> e4m3 in registers, for the FP8 (W4A8) wgmma tiles (docs/fp8.md, reference/fp8_model.hpp). An
// element m of a block with scale exponent x, in a row with exponent c, becomes the e4m3 byte of m x 2^d,
// d = x - c (<= 6 by the choice of c): the 8 magnitudes at d form an 8-byte table (two registers), looked
// up by `prmt` with each element's 3 magnitude bits, and the sign bit ORed in.
//
// A W4A8 layer's records (gemv_layout.hpp, pack_expert with row exponents) are made for this decode:
// - each weight word holds, in nibble i, the magnitude of element kFp8NibbleElement[i] in bits 0-2 and a
//   sign in bit 3: those of elements 0, 3, 1, 2 in the odd nibbles (bits 7, 15, 23, 31), those of 4, 7,
//   5, 6 in the even ones. So a word decodes in 7 instructions to two registers, bytes [e0, e3, e1, e2]
//   and [e4, e7, e5, e6] (fp8_chunk_order.hpp orders the activations to match): one mask makes both
//   prmt selectors, and the signs are in place (or 4 bits below it) already.
// - each scale byte holds the block's shift code 8d (fp8_shift_code), a multiple of 8 as a byte too: the
//   byte offset of its table in an array of every code's table (fp8_entry_table), so a lane's table is
//   one 8-byte shared-memory load at that offset.
//
// Tables: d >= -5 is the d = 0 table with 8d added to each nonzero byte's exponent field (exact, no carry
// between bytes); d < -5 rounds to e4m3 subnormals (or zero) as float_to_e4m3 does, through the
// converter (rare: blocks more than 11 exponents below their row's largest); a NaN scale (0xFF) gives
// NaN (0x7F) for every element of its block, as the MX value of such a block is NaN.
#include <cstdint>

#if defined(__CUDACC__)
#include <cuda_fp8.h>
#define MXMOE_FP8_HD __host__ __device__ __forceinline__
#else
#define MXMOE_FP8_HD inline
#endif
#if !defined(__CUDA_ARCH__)
#include <cmath>

#include "mxmoe/formats.hpp"
#endif

namespace mxmoe::kernels {

inline constexpr uint32_t kFp8Table0 = 0x3C383000u;  // e4m3 of 0, 0.5, 1, 1.5 (magnitude codes 0..3)
inline constexpr uint32_t kFp8Table1 = 0x4C484440u;  // e4m3 of 2, 3, 4, 6 (codes 4..7)
inline constexpr uint32_t kFp8NanTable = 0x7F7F7F7Fu;
inline constexpr int kFp8FastMinShift = -5;  // the smallest d whose table is the shifted d = 0 table
inline constexpr int kFp8MaxShift = 6;       // c = (the row's largest x) - 6

struct alignas(8) Fp8Table {
  uint32_t lo, hi;  // bytes 0..3: magnitude codes 0..3; 4..7: codes 4..7
};

// The e4m3 byte of a float (RNE, saturating; float_to_e4m3 on the host).
MXMOE_FP8_HD uint32_t e4m3_byte(float v) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint32_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
#else
  return float_to_e4m3(v);
#endif
}

MXMOE_FP8_HD float pow2f(float v, int e) {
#if defined(__CUDA_ARCH__)
  return ldexpf(v, e);
#else
  return std::ldexp(v, e);
#endif
}

// The table below kFp8FastMinShift: each magnitude's e4m3 rounding (subnormals, zero).
#if defined(__CUDACC__)
__host__ __device__ __noinline__
#else
inline
#endif
    Fp8Table fp8_slow_table(int d) {
  constexpr float kMagnitudes[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  Fp8Table t{0, 0};
  for (int i = 1; i < 8; ++i) {
    const uint32_t byte = e4m3_byte(pow2f(kMagnitudes[i], d));
    if (i < 4) t.lo |= byte << (8 * i);
    else t.hi |= byte << (8 * (i - 4));
  }
  return t;
}

// A block's shift code: 8d, d = min(x - c, kFp8MaxShift) (x: its scale's exponent, c: its row's), d
// held at -16 (every magnitude rounds to zero from d = -13); kFp8NanCode, the code of d = 7 (which no
// finite scale makes), for a NaN scale. Past K the padding blocks (zero weights) above the row's largest
// are held at kFp8MaxShift too: their zero codes read byte 0, which no table changes.
inline constexpr int kFp8NanCode = 8 * (kFp8MaxShift + 1);
MXMOE_FP8_HD int fp8_shift_code(uint32_t scale, int c) {
  if (scale == 0xFFu) return kFp8NanCode;
  int d = static_cast<int>(scale) - 127 - c;
  d = d < kFp8MaxShift ? d : kFp8MaxShift;
  d = d > -16 ? d : -16;
  return 8 * d;
}

// Whether a shift code's table is the shifted d = 0 table (fp8_fast_table): all but a NaN scale's and
// those below kFp8FastMinShift.
MXMOE_FP8_HD bool fp8_fast_code(int code) { return code != kFp8NanCode && code >= 8 * kFp8FastMinShift; }
MXMOE_FP8_HD Fp8Table fp8_fast_table(int code) {
  const auto step = static_cast<uint32_t>(code);
  return {kFp8Table0 + step * 0x01010100u, kFp8Table1 + step * 0x01010101u};
}

// The table of a block's shift code.
MXMOE_FP8_HD Fp8Table fp8_code_table(int code) {
  if (code == kFp8NanCode) return {kFp8NanTable, kFp8NanTable};
  return fp8_fast_code(code) ? fp8_fast_table(code) : fp8_slow_table(code / 8);
}

// The table of scale byte `scale` in a row of exponent c.
MXMOE_FP8_HD Fp8Table fp8_table(uint32_t scale, int c) { return fp8_code_table(fp8_shift_code(scale, c)); }

// Every code's table, entry e holding the table of the code whose byte is 8e (codes -128 .. -8 in entries
// 16 .. 31, 0 .. kFp8NanCode in 0 .. 7): a code's byte, as a record stores it, is its table's byte offset
// in the array. Entries 8 .. 15 (d = 8 .. 15) no code reaches; they hold NaN tables.
inline constexpr int kFp8TableEntries = 32;
MXMOE_FP8_HD Fp8Table fp8_entry_table(int entry) {
  const int code = entry < 16 ? 8 * entry : 8 * entry - 256;
  return code > kFp8NanCode ? Fp8Table{kFp8NanTable, kFp8NanTable} : fp8_code_table(code);
}

// Byte i of the result is byte (nibble i of `selector`) of the 8 bytes b:a, for selectors whose nibbles 0..3
// are 0..7 (their top bits clear); the selector's upper 16 bits are not read. In device code the bare prmt:
// __byte_perm clears each nibble's top bit itself, one `and` a prmt, which decode_e2m1x8_e4m3's selectors
// do not need (one mask for both: 8 instructions a word became 7).
MXMOE_FP8_HD uint32_t byte_perm(uint32_t a, uint32_t b, uint32_t selector) {
#if defined(__CUDA_ARCH__)
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(selector));
  return r;
#else
  const uint64_t bytes = static_cast<uint64_t>(b) << 32 | a;
  uint32_t out = 0;
  for (int i = 0; i < 4; ++i) out |= static_cast<uint32_t>((bytes >> (8 * ((selector >> (4 * i)) & 7))) & 0xFF) << (8 * i);
  return out;
#endif
}

// The element whose magnitude nibble i of a W4A8 word holds, and the nibble holding each element's sign.
inline constexpr int kFp8NibbleElement[8] = {0, 3, 1, 2, 4, 7, 5, 6};
inline constexpr int kFp8SignNibble[8] = {1, 5, 7, 3, 0, 4, 6, 2};

// Natural word (element i in bits 4i..4i+3) -> a W4A8 layer's word (upload, host).
MXMOE_FP8_HD uint32_t pack_e2m1x8_fp8(uint32_t q) {
  uint32_t out = 0;
  for (int i = 0; i < 8; ++i) {
    const uint32_t code = (q >> (4 * kFp8NibbleElement[i])) & 0xFu;
    out |= (code & 7u) << (4 * i);
    out |= (code >> 3) << (4 * kFp8SignNibble[kFp8NibbleElement[i]] + 3);
  }
  return out;
}

// One W4A8 word -> its 8 elements as e4m3 bytes: a = [e0, e3, e1, e2], b = [e4, e7, e5, e6].
MXMOE_FP8_HD void decode_e2m1x8_e4m3(uint32_t p, Fp8Table t, uint32_t& a, uint32_t& b) {
  const uint32_t magnitudes = p & 0x77777777u;
  a = byte_perm(t.lo, t.hi, magnitudes) | (p & 0x80808080u);
  b = byte_perm(t.lo, t.hi, magnitudes >> 16) | ((p << 4) & 0x80808080u);
}

}  // namespace mxmoe::kernels
