// W4A8 numerics (src/reference/fp8_model.hpp; issue 46's planned Hopper `fp8` precision): MXFP4 weights
// are exact in e4m3 within 15 scale exponents of their row's largest and off by at most 2^(c - 10)
// below; per-row e4m3 activations are within half an e4m3 step; and the whole layer's error against the
// fp64 reference, on gpt-oss-shaped layers, next to MXFP8's (the SM12x path) on the same inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "mxmoe/formats.hpp"
#include "mxmoe/reference.hpp"
#include "mxmoe/weights.hpp"
#include "reference/fp8_model.hpp"
#include "test_support.hpp"

namespace mxmoe {
namespace {

using test::fresh_seed;

// One row of 90 random MXFP4 blocks (K = 2880) whose scale exponents lie in [top - spread, top].
struct Row {
  std::vector<uint8_t> scales;
  std::vector<double> values;
};
Row random_row(std::mt19937_64& rng, int top, int spread) {
  Row row;
  std::uniform_int_distribution<int> scale(top - spread, top), code(0, 15);
  for (int b = 0; b < 90; ++b) {
    row.scales.push_back(static_cast<uint8_t>(b == 0 ? top : scale(rng)));  // the row's largest is `top`
    for (int j = 0; j < kMxBlock; ++j)
      row.values.push_back(e2m1_to_float(static_cast<uint8_t>(code(rng))) * e8m0_to_float(row.scales.back()));
  }
  return row;
}

TEST(Fp8Numerics, WeightsAreExactWithin15ScaleExponents) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 200; ++trial) {
    const int top = std::uniform_int_distribution<int>(90, 140)(rng);
    Row row = random_row(rng, top, 14);
    const int c = fp8::row_exponent(row.scales);
    ASSERT_EQ(c, top - 127 - 6);
    std::vector<double> got = row.values;
    fp8::e4m3_weight_row(got, c);
    ASSERT_EQ(got, row.values) << "a row within the window changed (top " << top << ")";
  }
}

TEST(Fp8Numerics, WeightsBelowTheWindowRoundWithinTheirBound) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  int changed = 0;
  for (int trial = 0; trial < 100; ++trial) {
    const int top = std::uniform_int_distribution<int>(100, 140)(rng);
    Row row = random_row(rng, top, 24);
    const int c = fp8::row_exponent(row.scales);
    std::vector<double> got = row.values;
    fp8::e4m3_weight_row(got, c);
    for (size_t i = 0; i < got.size(); ++i) {
      const int x = row.scales[i / kMxBlock] - 127;
      if (x >= top - 127 - 14) {
        ASSERT_EQ(got[i], row.values[i]) << "element " << i << " of a block inside the window";
      } else {
        ASSERT_LE(std::fabs(got[i] - row.values[i]), std::ldexp(1.0, c - 10)) << "element " << i;
        changed += got[i] != row.values[i];
      }
    }
  }
  EXPECT_GT(changed, 0) << "no block below the window was exercised";
  // A NaN scale byte is skipped when choosing the offset.
  EXPECT_EQ(fp8::row_exponent(std::vector<uint8_t>{kE8m0Nan, 127, 120}), -6);
}

TEST(Fp8Numerics, RowActivationsAreWithinHalfAnE4m3Step) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> x(2880);
    const float spread = std::ldexp(1.f, trial % 20 - 10);
    for (float& v : x) v = n(rng) * spread;
    x[7] *= 30.f;  // an outlier channel
    const std::vector<float> original = x;
    const float scale = fp8::row_round_trip(x);
    float amax = 0.f;
    for (float v : original) amax = std::max(amax, std::fabs(v));
    ASSERT_FLOAT_EQ(scale, amax / 448.f);
    for (size_t i = 0; i < x.size(); ++i) {
      // e4m3 normals keep 3 fraction bits (half a step: 2^-4 relative); subnormals are steps of 2^-9.
      const double bound = std::max(std::fabs(original[i]) / 16.0, std::ldexp(static_cast<double>(scale), -10)) * 1.0001;
      ASSERT_LE(std::fabs(static_cast<double>(x[i]) - original[i]), bound) << "element " << i;
    }
  }
  std::vector<float> zeros(64, 0.f);
  EXPECT_EQ(fp8::row_round_trip(zeros), 0.f);
  EXPECT_TRUE(std::all_of(zeros.begin(), zeros.end(), [](float v) { return v == 0.f; }));
  std::vector<float> bad(64, 1.f);
  bad[3] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isnan(fp8::row_round_trip(bad)));
  EXPECT_TRUE(std::all_of(bad.begin(), bad.end(), [](float v) { return std::isnan(v); }));
}

// GEMM2's static scale: the largest power of two that keeps the clamped SwiGLU's bound within e4m3's 448,
// and the SwiGLU's outputs (swept over its inputs) within that bound; none without a bound (alpha <= 0).
TEST(Fp8Numerics, Gemm2ScaleFitsTheSwigluBound) {
  EXPECT_EQ(fp8::gemm2_input_scale(1.702f, 7.f), 8.f);  // gpt-oss: |y| <= 7 x 8 = 56, 56 x 8 = 448
  EXPECT_EQ(fp8::gemm2_input_scale(0.f, 7.f), 0.f);
  EXPECT_EQ(fp8::gemm2_input_scale(-1.f, 7.f), 0.f);
  EXPECT_EQ(fp8::gemm2_input_scale(1.702f, 1e30f), 0.f);  // 1 / s would be below float's normals
  // A tiny clamp: the gate's negative side bounds it, 0.2785 / 1.702 x 1.001 = 0.164, so s = 2048.
  EXPECT_EQ(fp8::gemm2_input_scale(1.702f, 1e-3f), 2048.f);
  for (const float alpha : {0.05f, 0.5f, 1.702f, 4.f})
    for (const float limit : {0.25f, 1.f, 3.f, 7.f, 10.f, 100.f}) {
      const float s = fp8::gemm2_input_scale(alpha, limit);
      int e = 0;
      ASSERT_EQ(std::frexp(s, &e), 0.5f) << "a power of two, alpha " << alpha << " limit " << limit;
      // The SwiGLU as the kernels compute it (gemv::swiglu), in fp32, over gates up to past the clamp.
      float worst = 0;
      for (float gate = -60; gate <= limit + 1; gate += 1.f / 64)
        for (const float linear : {-1e9f, -limit, 0.f, limit, 1e9f}) {
          const float g = std::min(gate, limit), l = std::clamp(linear, -limit, limit);
          worst = std::max(worst, std::fabs(g / (1.f + std::exp(-alpha * g)) * (l + 1.f)));
        }
      EXPECT_LE(worst * s, 448.f * (1 + 1e-6f)) << "alpha " << alpha << " limit " << limit;
      EXPECT_GT(worst * s * 2, 448.f * 0.99f) << "the largest such power of two, alpha " << alpha << " limit " << limit;
    }
}

// static_round_trip: e4m3(x s) / s, within half an e4m3 step (2^-4 relative, 2^-10 / s below the normals).
TEST(Fp8Numerics, StaticActivationsAreWithinHalfAnE4m3Step) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  const float s = 8.f;
  std::vector<float> x(4096);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::clamp(n(rng) * std::ldexp(1.f, static_cast<int>(i % 16) - 12), -56.f, 56.f);
  const std::vector<float> original = x;
  fp8::static_round_trip(x, s);
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(x[i] * s, e4m3_to_float(float_to_e4m3(original[i] * s))) << "element " << i;
    const double bound = std::max(std::fabs(original[i]) / 16.0, std::ldexp(1.0, -10) / s) * 1.0001;
    ASSERT_LE(std::fabs(static_cast<double>(x[i]) - original[i]), bound) << "element " << i;
  }
  std::vector<float> nan_in{1.f, std::numeric_limits<float>::quiet_NaN(), 56.f};
  fp8::static_round_trip(nan_in, s);
  EXPECT_EQ(nan_in[0], 1.f);
  EXPECT_TRUE(std::isnan(nan_in[1]));
  EXPECT_EQ(nan_in[2], 56.f);
}

double rel_l2(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

// The layer's error against the exact fp64 reference, on gpt-oss-shaped GEMMs (H = I = 2880, E = 2,
// k = 2, T = 8, checkpoint-like random weights), for plain hidden states and for hidden states 4x larger
// with a few channels 30x the rest (the SwiGLU clamp at 7 then bites on part of the gates): W4A8
// (per-token e4m3 hidden states, GEMM2's input e4m3 at the static scale, e4m3 weights) next to MXFP8
// activations (the SM12x path) and to rounding
// the exact output to bf16 (the floor of any bf16 output). Bounds: about 1.4x the largest error seen
// over 6 seeds run while writing it (docs/fp8.md).
TEST(Fp8Numerics, LayerErrorAgainstTheFp64Reference) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const MoeConfig c = test::make_config(2, 2, 2880, 2880);
  const MoeLayerData layer = MoeLayerData::random(c, seed);
  // Checkpoint-like scales lie within e4m3's window on every row: the fp8 weights are the exact ones.
  for (const auto* scales : {&layer.w1_scales, &layer.w2_scales}) {
    const size_t blocks = 2880 / kMxBlock;
    for (size_t r = 0; r < scales->size() / blocks; ++r) {
      const auto first = scales->begin() + static_cast<std::ptrdiff_t>(r * blocks);
      const auto [lo, hi] = std::minmax_element(first, first + static_cast<std::ptrdiff_t>(blocks));
      ASSERT_LE(*hi - *lo, 14) << "row " << r << " spans more than e4m3's window";
    }
  }
  const int64_t T = 8;
  for (const bool outliers : {false, true}) {
    SCOPED_TRACE(outliers ? "outlier channels, clamp active" : "plain hidden states");
    std::normal_distribution<float> n(0.f, outliers ? 4.f : 1.f);
    std::vector<uint16_t> hidden(static_cast<size_t>(T * c.hidden));
    for (size_t i = 0; i < hidden.size(); ++i) {
      const bool outlier = outliers && (i % c.hidden) % 997 == 5;
      hidden[i] = float_to_bf16(n(rng) * (outlier ? 30.f : 1.f));
    }
    std::vector<float> logits(static_cast<size_t>(T * c.num_experts));
    for (float& l : logits) l = n(rng);
    std::vector<double> exact(hidden.size()), got(hidden.size());
    reference_moe_f64(c, layer.view(), hidden, logits, T, exact);
    std::vector<double> bf16_out(exact.size());
    for (size_t i = 0; i < exact.size(); ++i) bf16_out[i] = bf16_to_float(float_to_bf16(static_cast<float>(exact[i])));
    ReferenceOptions mx;
    mx.mxfp8_gemm1_input = mx.mxfp8_gemm2_input = true;
    reference_moe_f64(c, layer.view(), hidden, logits, T, got, mx);
    const double e_mx = rel_l2(got, exact);
    ReferenceOptions fp8;
    fp8.fp8_weights = fp8.fp8_gemm1_input = fp8.fp8_gemm2_input = true;
    reference_moe_f64(c, layer.view(), hidden, logits, T, got, fp8);
    const double e_fp8 = rel_l2(got, exact), e_bf16 = rel_l2(bf16_out, exact);
    std::printf("%s: relative L2 to fp64: fp8 (W4A8) %.4f, MXFP8 %.4f, bf16 output rounding %.5f\n",
                outliers ? "outliers x30, clamp" : "plain", e_fp8, e_mx, e_bf16);
    testing::Test::RecordProperty(outliers ? "fp8_outliers" : "fp8_plain", std::to_string(e_fp8));
    testing::Test::RecordProperty(outliers ? "mxfp8_outliers" : "mxfp8_plain", std::to_string(e_mx));
    EXPECT_LT(e_bf16, 0.003);
    EXPECT_GT(e_fp8, 10 * e_bf16) << "the activations' quantisation must show";
    EXPECT_LE(e_fp8, 0.06);
    EXPECT_LE(e_mx, 0.07);
  }
}

}  // namespace
}  // namespace mxmoe
