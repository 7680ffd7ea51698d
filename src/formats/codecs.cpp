// Scalar codecs for bf16, e2m1, e4m3 (fn) and e8m0 (FACTS.md §2, §3).
// Everything is integer bit manipulation: no libm call, no dependence on the FPU rounding mode,
// so every result is exact and the same on every host.
#include <bit>
#include <cstdint>
#include <limits>

#include "mxmoe/formats.hpp"

namespace mxmoe {
namespace {

// A small float format with an implicit leading bit, subnormals and no inf (e2m1, e4m3fn).
struct MiniFloat {
  int ebits;       // exponent bits
  int mbits;       // explicit mantissa bits
  int bias;        // exponent bias
  int emax;        // unbiased exponent of the largest finite value
  uint32_t max_n;  // significand of the largest finite value, implicit bit included (e2m1: 0b11, e4m3: 0b1110)
};

constexpr MiniFloat kE2m1{2, 1, 1, 2, 3};   // 3 * 2^(2-1) = 6
constexpr MiniFloat kE4m3{4, 3, 7, 8, 14};  // 14 * 2^(8-3) = 448
// encode_magnitude sends float subnormals straight to zero: half the smallest subnormal of each
// format must lie above 2^-126.
static_assert(-kE2m1.bias - kE2m1.mbits > -126 && -kE4m3.bias - kE4m3.mbits > -126);

// m * 2^-sh rounded to nearest, ties to even. m < 2^24 (a float significand), sh >= 1.
uint32_t shift_right_rne(uint32_t m, int sh) {
  if (sh > 24) return 0;  // m < 2^24 <= half an output unit
  const uint32_t q = m >> sh;
  const uint32_t rest = m & ((1u << sh) - 1);
  const uint32_t half = 1u << (sh - 1);
  return (rest > half || (rest == half && (q & 1))) ? q + 1 : q;
}

// The code (sign bit excluded) of |x|, rounded to nearest even on the format's grid and
// saturated to its largest finite value. `abs_bits` are the bits of a finite float with sign 0.
uint32_t encode_magnitude(uint32_t abs_bits, const MiniFloat& f) {
  // Zero and float subnormals (< 2^-126, far under half the smallest e2m1/e4m3 step) give 0.
  if (abs_bits < 0x800000u) return 0;
  const uint32_t m = (abs_bits & 0x7FFFFFu) | 0x800000u;
  const int exp = static_cast<int>(abs_bits >> 23) - 127;  // |x| = m * 2^(exp - 23), m in [2^23, 2^24)
  const int emin = 1 - f.bias;
  int q = (exp > emin ? exp : emin) - f.mbits;  // exponent of one unit in the last place
  uint32_t n = shift_right_rne(m, 23 + q - exp);
  if (n == (2u << f.mbits)) {  // rounding carried into the next binade
    n >>= 1;
    ++q;
  }
  const int top = q + f.mbits;  // unbiased exponent of the result when normal
  const uint32_t max_code = (static_cast<uint32_t>(f.emax + f.bias) << f.mbits) | (f.max_n - (1u << f.mbits));
  if (top > f.emax || (top == f.emax && n > f.max_n)) return max_code;  // satfinite
  if (n < (1u << f.mbits)) return n;  // subnormal (exponent field 0); also zero
  return (static_cast<uint32_t>(top + f.bias) << f.mbits) | (n - (1u << f.mbits));
}

// 2^e as a float for e in [-149, 127], built from bits (subnormals included).
float pow2(int e) {
  if (e >= -126) return std::bit_cast<float>(static_cast<uint32_t>(e + 127) << 23);
  return std::bit_cast<float>(1u << (e + 149));
}

float decode(uint32_t code, const MiniFloat& f) {
  const int sign_shift = f.ebits + f.mbits;
  const uint32_t e = (code >> f.mbits) & ((1u << f.ebits) - 1);
  const uint32_t m = code & ((1u << f.mbits) - 1);
  // Small integer times a power of two: exact.
  const float mag = e == 0 ? static_cast<float>(m) * pow2(1 - f.bias - f.mbits)
                           : static_cast<float>((1u << f.mbits) | m) * pow2(static_cast<int>(e) - f.bias - f.mbits);
  return ((code >> sign_shift) & 1) ? -mag : mag;
}

}  // namespace

float bf16_to_float(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

uint16_t float_to_bf16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) {
    // NaN: keep sign and top payload bits, set the quiet bit (a truncated payload could be zero).
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  }
  // RNE: add 0x7FFF plus the lowest kept bit; a carry out of the exponent correctly gives inf.
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

float e2m1_to_float(uint8_t code) { return decode(code & 0xFu, kE2m1); }

// Sign is kept for results that round to zero (-0.1 -> 0x8, -0.0), as the hardware convert does.
uint8_t float_to_e2m1(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t abs_bits = u & 0x7FFFFFFFu;
  if (abs_bits > 0x7F800000u) return 0;  // NaN: e2m1 has none; the MX scale byte carries it
  const uint32_t sign = (u >> 31) << 3;
  if (abs_bits == 0x7F800000u) return static_cast<uint8_t>(sign | 0x7u);  // +-inf saturate to +-6
  return static_cast<uint8_t>(sign | encode_magnitude(abs_bits, kE2m1));
}

float e4m3_to_float(uint8_t code) {
  if ((code & 0x7Fu) == 0x7Fu) return std::numeric_limits<float>::quiet_NaN();
  return decode(code, kE4m3);
}

// NaN keeps its sign: +NaN -> 0x7F, -NaN -> 0xFF (both are the e4m3fn NaN). inf saturates to +-448.
uint8_t float_to_e4m3(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t abs_bits = u & 0x7FFFFFFFu;
  const uint32_t sign = (u >> 31) << 7;
  if (abs_bits > 0x7F800000u) return static_cast<uint8_t>(sign | 0x7Fu);
  if (abs_bits == 0x7F800000u) return static_cast<uint8_t>(sign | 0x7Eu);
  return static_cast<uint8_t>(sign | encode_magnitude(abs_bits, kE4m3));
}

float e8m0_to_float(uint8_t code) {
  if (code == kE8m0Nan) return std::numeric_limits<float>::quiet_NaN();
  return pow2(static_cast<int>(code) - 127);  // code 0 is 2^-127, a float subnormal
}

}  // namespace mxmoe
