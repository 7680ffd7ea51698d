#pragma once
// MX formats (OCP Microscaling v1.0): scalar codecs for e2m1, e4m3 (fn), e8m0 and bf16; MX block
// quantise/dequantise for MXFP4 and MXFP8; the gpt-oss nibble packing. FACTS.md §2 and §3.
// The 128x4 swizzled scale layout is in scale_layout.hpp.
#include <cstddef>
#include <cstdint>
#include <span>

namespace mxmoe {

inline constexpr int kMxBlock = 32;  // elements sharing one e8m0 scale

// How a block's shared scale is chosen (FACTS.md §3).
enum class ScaleRule {
  Floor,  // OCP: 2^(floor(log2(amax)) - emax_elem); values above the element max clip (saturate)
  Rceil,  // cuBLAS/FlashInfer: 2^ceil(log2(amax / elem_max)); never clips
};

// --- scalar codecs (host) ---------------------------------------------------------------------
// bf16 is carried as its 16 raw bits.
float bf16_to_float(uint16_t bits);
uint16_t float_to_bf16(float x);  // round to nearest even; NaN stays NaN

float e2m1_to_float(uint8_t code);  // low 4 bits: 0,0.5,1,1.5,2,3,4,6 and negatives (bit 3 = sign)
uint8_t float_to_e2m1(float x);     // RNE, saturating to +-6 (inf too); NaN -> 0 (e2m1 has no NaN: an
                                    // MX block carries NaN in its scale byte instead). The sign is kept
                                    // when the result is zero: -0.1 -> 0x8 (-0), as the hardware convert.

float e4m3_to_float(uint8_t code);  // e4m3fn: bias 7, max 448, 0x7F/0xFF NaN, no inf
uint8_t float_to_e4m3(float x);     // RNE, saturating to +-448 (satfinite, inf too); NaN -> 0x7F with
                                    // the NaN's sign bit (+NaN 0x7F, -NaN 0xFF); sign kept on zero results

float e8m0_to_float(uint8_t code);  // 2^(code-127); 0xFF -> NaN
inline constexpr uint8_t kE8m0Nan = 0xFF;

// --- MX blocks ---------------------------------------------------------------------------------
// x.size() must be a multiple of 32. Scales: one byte per block, row-major (plain, unswizzled).
// A block that holds inf or NaN gets scale 0xFF, element codes 0, and dequantises to NaN. An all-zero
// block gets scale byte 0 and zero elements (+-0 keep their sign). The scale exponent is clamped to
// e8m0's [-127, 127]. Elements are x / 2^scale, RNE, saturated. Dequantisation is exact, except that a
// value past the float range becomes +-inf (RCEIL on a block whose amax is within a few percent of
// FLT_MAX can round an element up to 2^128; raw bytes can hold such values too).
// MXFP4: packed.size() == x.size()/2, element 2j in the low nibble of byte j, 2j+1 in the high.
void mxfp4_quantize(std::span<const float> x, ScaleRule rule, std::span<uint8_t> packed,
                    std::span<uint8_t> scales);
void mxfp4_dequantize(std::span<const uint8_t> packed, std::span<const uint8_t> scales,
                      std::span<float> x);
// MXFP8 (e4m3 elements): codes.size() == x.size().
void mxfp8_quantize(std::span<const float> x, ScaleRule rule, std::span<uint8_t> codes,
                    std::span<uint8_t> scales);
void mxfp8_dequantize(std::span<const uint8_t> codes, std::span<const uint8_t> scales,
                      std::span<float> x);

// The shared scale byte of one block of 32 values for an element format of max exponent emax_elem
// and max value elem_max (e2m1: 2, 6; e4m3: 8, 448); emax_elem must be floor(log2(elem_max)).
// RCEIL is computed exactly (the smallest s with amax <= elem_max * 2^s); it
// equals FlashInfer's fp32 `amax * (1/elem_max)` rounded up to a power of two whenever that product
// is a normal float (checked over every float significand).
uint8_t mx_block_scale(std::span<const float> block, ScaleRule rule, int emax_elem, float elem_max);

}  // namespace mxmoe
