#pragma once
// The numerics of W4A8 on Hopper (issue 46's planned `fp8` precision), for the CPU reference and the
// accuracy measurements that choose it: MXFP4 weights as e4m3 with one power-of-two offset per output
// row, activations as e4m3 with one fp32 scale per row (token or pair), fp32-class accumulation (the
// reference accumulates in fp64).
//
// Weights. A wgmma multiplies e4m3 operands over K = 32 per instruction and cannot apply MXFP4's
// per-(row, 32-block) scales inside it, so the scales are folded into the values: e2m1 m x 2^x (x the
// block's scale exponent) is m x 2^(x - c) x 2^c with one exponent c per row, and 2^c multiplies the
// row's output in the epilogue. m x 2^(x - c) is exact in e4m3 when 0.5 x 2^(x - c) >= 2^-9 (e4m3's
// smallest subnormal) and 6 x 2^(x - c) <= 448: with c = max_x - 6, every block whose exponent is within
// 14 of the row's largest is exact; smaller blocks round to e4m3's subnormals (absolute error at most
// 2^(c - 10), under 2^-16 of the row's largest weight).
//
// Activations. One fp32 scale per row, amax / 448 (so the row's largest magnitude is e4m3's largest);
// it multiplies the accumulator in the epilogue. A per-32-block activation scale would vary along K
// inside a wgmma, as the weights' does, and cannot be folded: per row is what a K = 32 wgmma can use.
#include <cstdint>
#include <span>

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

}  // namespace mxmoe::fp8
