// MX block quantisation (OCP Microscaling v1.0, FACTS.md §3): one e8m0 scale per 32 elements,
// elements in e2m1 (MXFP4, gpt-oss nibble packing, FACTS.md §2) or e4m3 (MXFP8).
#include <bit>
#include <cstddef>
#include <cstdint>

#include "mxmoe/error.hpp"
#include "mxmoe/formats.hpp"

namespace mxmoe {
namespace {

constexpr int kE2m1Emax = 2;
constexpr float kE2m1Max = 6.0f;
constexpr int kE4m3Emax = 8;
constexpr float kE4m3Max = 448.0f;

// floor(log2(a)) and the significand of a (bit 23 the leading one) for a finite a > 0,
// float subnormals included.
struct Binade {
  int exp;
  uint32_t sig;
};

Binade binade_of(float a) {
  const uint32_t u = std::bit_cast<uint32_t>(a) & 0x7FFFFFFFu;
  const int e = static_cast<int>(u >> 23);
  const uint32_t m = u & 0x7FFFFFu;
  if (e != 0) return {e - 127, m | 0x800000u};
  const int lead = 31 - std::countl_zero(m);
  return {lead - 149, m << (23 - lead)};
}

bool is_finite_bits(float x) { return (std::bit_cast<uint32_t>(x) & 0x7F800000u) != 0x7F800000u; }

// 2^-(byte-127), the multiplier that takes a block to element units. byte in [0, 254].
float inverse_scale(uint8_t byte) { return e8m0_to_float(static_cast<uint8_t>(254 - byte)); }

// Elements: x * 2^-s, then the element codec (RNE, satfinite). The multiply is exact except where
// the product falls below 2^-126, and such values are far under half the smallest element step
// (2^-2 for e2m1, 2^-10 for e4m3), so they round to zero either way. It cannot overflow: the
// scale keeps amax * 2^-s below 2^(emax_elem + 1).
template <class Encode>
void quantize_block(std::span<const float> block, uint8_t scale, Encode encode, uint8_t* out) {
  if (scale == kE8m0Nan) {  // the scale byte alone marks the block as NaN
    for (size_t i = 0; i < block.size(); ++i) out[i] = 0;
    return;
  }
  const float inv = inverse_scale(scale);
  for (size_t i = 0; i < block.size(); ++i) out[i] = encode(block[i] * inv);
}

void check_quantize_sizes(size_t n, size_t elem_bytes, size_t scales, size_t elem_bytes_expected,
                          const char* fn, const char* elem_name) {
  MXMOE_REQUIRE(n % kMxBlock == 0, fn, ": x.size() must be a multiple of ", kMxBlock, ", got ", n);
  MXMOE_REQUIRE(elem_bytes == elem_bytes_expected, fn, ": ", elem_name, ".size() must be ",
                elem_bytes_expected, " for x.size() ", n, ", got ", elem_bytes);
  MXMOE_REQUIRE(scales == n / kMxBlock, fn, ": scales.size() must be x.size()/32 = ", n / kMxBlock,
                ", got ", scales);
}

}  // namespace

uint8_t mx_block_scale(std::span<const float> block, ScaleRule rule, int emax_elem, float elem_max) {
  MXMOE_REQUIRE(block.size() == static_cast<size_t>(kMxBlock), "mx_block_scale: block.size() must be ",
                kMxBlock, ", got ", block.size());
  MXMOE_REQUIRE(elem_max > 0.0f && is_finite_bits(elem_max), "mx_block_scale: elem_max must be finite and > 0, got ",
                elem_max);
  const Binade em = binade_of(elem_max);
  MXMOE_REQUIRE(em.exp == emax_elem, "mx_block_scale: emax_elem must be floor(log2(elem_max)) = ", em.exp,
                ", got ", emax_elem);

  float amax = 0.0f;
  for (const float x : block) {
    if (!is_finite_bits(x)) return kE8m0Nan;
    const float a = x < 0.0f ? -x : x;
    if (a > amax) amax = a;
  }
  if (amax == 0.0f) return 0;

  const Binade b = binade_of(amax);
  int s = 0;
  if (rule == ScaleRule::Floor) {
    s = b.exp - emax_elem;
  } else {
    // Exact RCEIL: the smallest s with amax <= elem_max * 2^s. With amax = sa * 2^ea and
    // elem_max = se * 2^ee (sa, se in [1, 2)) that is ea - ee, plus one when sa > se.
    s = b.exp - em.exp + (b.sig > em.sig ? 1 : 0);
  }
  if (s < -127) s = -127;  // e8m0 range; a lower clamp only coarsens tiny blocks, never clips
  if (s > 127) s = 127;
  return static_cast<uint8_t>(s + 127);
}

void mxfp4_quantize(std::span<const float> x, ScaleRule rule, std::span<uint8_t> packed, std::span<uint8_t> scales) {
  check_quantize_sizes(x.size(), packed.size(), scales.size(), x.size() / 2, "mxfp4_quantize", "packed");
  uint8_t codes[kMxBlock];
  for (size_t b = 0; b < scales.size(); ++b) {
    const auto block = x.subspan(b * kMxBlock, kMxBlock);
    scales[b] = mx_block_scale(block, rule, kE2m1Emax, kE2m1Max);
    quantize_block(block, scales[b], float_to_e2m1, codes);
    for (int j = 0; j < kMxBlock / 2; ++j) {  // element 2j low nibble, 2j+1 high nibble
      packed[b * kMxBlock / 2 + j] = static_cast<uint8_t>(codes[2 * j] | (codes[2 * j + 1] << 4));
    }
  }
}

void mxfp4_dequantize(std::span<const uint8_t> packed, std::span<const uint8_t> scales, std::span<float> x) {
  check_quantize_sizes(x.size(), packed.size(), scales.size(), x.size() / 2, "mxfp4_dequantize", "packed");
  for (size_t i = 0; i < x.size(); ++i) {
    const uint8_t byte = packed[i / 2];
    const uint8_t code = (i % 2 == 0) ? (byte & 0xF) : (byte >> 4);
    // value * 2^s is exact (or inf beyond the float range); a 0xFF scale gives NaN even for 0.
    x[i] = e2m1_to_float(code) * e8m0_to_float(scales[i / kMxBlock]);
  }
}

void mxfp8_quantize(std::span<const float> x, ScaleRule rule, std::span<uint8_t> codes, std::span<uint8_t> scales) {
  check_quantize_sizes(x.size(), codes.size(), scales.size(), x.size(), "mxfp8_quantize", "codes");
  for (size_t b = 0; b < scales.size(); ++b) {
    const auto block = x.subspan(b * kMxBlock, kMxBlock);
    scales[b] = mx_block_scale(block, rule, kE4m3Emax, kE4m3Max);
    quantize_block(block, scales[b], float_to_e4m3, codes.data() + b * kMxBlock);
  }
}

void mxfp8_dequantize(std::span<const uint8_t> codes, std::span<const uint8_t> scales, std::span<float> x) {
  check_quantize_sizes(x.size(), codes.size(), scales.size(), x.size(), "mxfp8_dequantize", "codes");
  for (size_t i = 0; i < x.size(); ++i) x[i] = e4m3_to_float(codes[i]) * e8m0_to_float(scales[i / kMxBlock]);
}

}  // namespace mxmoe
