#pragma once
// The numerics of W4A8 on Hopper (the `fp8` precision), for the CPU reference, the accuracy
// measurements that chose them and the kernels' launch (gemm2_input_scale): MXFP4 weights as e4m3 with
// one power-of-two offset per output row, GEMM1's input as e4m3 with one fp32 scale per token, GEMM2's
// as e4m3 at one static power-of-two scale, fp32-class accumulation (the reference accumulates in fp64).
//
// Weights. A wgmma multiplies e4m3 operands over K = 32 per instruction and cannot apply MXFP4's
// per-(row, 32-block) scales inside it, so the scales are folded into the values: e2m1 m x 2^x (x the
// block's scale exponent) is m x 2^(x - c) x 2^c with one exponent c per row, and 2^c multiplies the
// row's output in the epilogue. m x 2^(x - c) is exact in e4m3 when 0.5 x 2^(x - c) >= 2^-9 (e4m3's
// smallest subnormal) and 6 x 2^(x - c) <= 448: with c = max_x - 6, every block whose exponent is within
// 14 of the row's largest is exact; smaller blocks round to e4m3's subnormals (absolute error at most
// 2^(c - 10), under 2^-16 of the row's largest weight).
//
// Activations. GEMM1's: one fp32 scale per token, amax / 448 (so the row's largest magnitude is e4m3's
// largest); it multiplies the accumulator in the epilogue. A per-32-block activation scale would vary
// along K inside a wgmma, as the weights' does, and cannot be folded: per row is what a K = 32 wgmma can
// use. GEMM2's: the clamped SwiGLU's output is bounded, so one static power of two s scales every row
// and GEMM1's epilogue writes e4m3(y x s) itself (no pass over the intermediate to find row maxima);
// e4m3 keeps 3 mantissa bits at any magnitude above 2^-6 / s, so only values below that lose precision
// against a per-row scale (measured: no change in the layer's error, docs/fp8.md).
#include <cstdint>
#include <span>
#include <string_view>

namespace mxmoe::fp8 {

// c for one MXFP4 row: max over its blocks of (scale byte - 127) - 6; NaN scales (0xFF) are skipped;
// a row of only NaN scales gives 0.
int row_exponent(std::span<const uint8_t> row_scales);

// Row values (exact MXFP4 values in fp64) as the e4m3 operand times 2^c sees them: each value v becomes
// e4m3(v / 2^c) x 2^c (round to nearest even, saturating). Exact inside the 15-exponent window above.
void e4m3_weight_row(std::span<double> row, int c);

// x [n] quantised to e4m3 with scale amax / 448 and back (in place); returns the scale. A row of zeros
// stays zero (scale 0); a NaN or inf anywhere makes the whole row NaN (scale NaN), as its scale would.
float row_round_trip(std::span<float> x);

// GEMM2's input scale: the largest power of two s with bound x s <= 448, the bound on |SwiGLU output|
// for `alpha` > 0: gate <= limit, so gate x sigmoid(alpha gate) lies in [-0.2785 / alpha,
// limit x sigmoid(alpha limit)], and |linear + 1| <= limit + 1. gpt-oss (alpha 1.702, limit 7): bound
// 56.0, s = 8. 0 when alpha <= 0 (the gate's negative side is then unbounded: no static scale fits) or
// when s or 1 / s would not be a normal float (limits beyond about 2^63 or below 2^-126).
float gemm2_input_scale(float alpha, float limit);
// The same, an Error naming `who` and the config's swiglu_alpha and swiglu_limit where there is none.
float require_gemm2_input_scale(float alpha, float limit, std::string_view who);

// x as GEMM2 reads it (in place): each value e4m3(v x s) / s (round to nearest even, saturating; NaN
// stays NaN).
void static_round_trip(std::span<float> x, float s);

}  // namespace mxmoe::fp8
