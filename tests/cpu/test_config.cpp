// MoeConfig presets and validation; MoeWeights shape checks; MoeLayerData::random.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "mxmoe/config.hpp"
#include "mxmoe/error.hpp"
#include "mxmoe/weights.hpp"
#include "test_support.hpp"

namespace {

using mxmoe::MoeConfig;
using mxmoe::MoeLayerData;
using mxmoe::MoeWeights;
using mxmoe::RoutingOrder;

using mxmoe::test::fresh_seed;
using mxmoe::test::make_config;

// The message of the Error f throws, or a failure when it throws none.
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const mxmoe::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected mxmoe::Error";
  return {};
}

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in: " << text;
}


void expect_gpt_oss_defaults(const MoeConfig& c) {
  EXPECT_EQ(c.routing, RoutingOrder::TopkThenSoftmax);
  EXPECT_FALSE(c.renormalize);
  EXPECT_EQ(c.swiglu_alpha, 1.702f);
  EXPECT_EQ(c.swiglu_limit, 7.0f);
}

TEST(Config, Presets) {
  const MoeConfig a = MoeConfig::gpt_oss_20b();
  EXPECT_EQ(a.name, "gpt-oss-20b");
  EXPECT_EQ(a.num_experts, 32);
  EXPECT_EQ(a.top_k, 4);
  EXPECT_EQ(a.hidden, 2880);
  EXPECT_EQ(a.intermediate, 2880);
  expect_gpt_oss_defaults(a);

  const MoeConfig b = MoeConfig::gpt_oss_120b();
  EXPECT_EQ(b.name, "gpt-oss-120b");
  EXPECT_EQ(b.num_experts, 128);
  EXPECT_EQ(b.top_k, 4);
  EXPECT_EQ(b.hidden, 2880);
  EXPECT_EQ(b.intermediate, 2880);
  expect_gpt_oss_defaults(b);

  const MoeConfig t = MoeConfig::tiny();
  EXPECT_EQ(t.name, "tiny");
  EXPECT_EQ(t.num_experts, 8);
  EXPECT_EQ(t.top_k, 2);
  EXPECT_EQ(t.hidden, 64);
  EXPECT_EQ(t.intermediate, 64);
  expect_gpt_oss_defaults(t);

  for (const auto& c : {a, b, t}) EXPECT_NO_THROW(c.validate()) << c.name;
}

TEST(Config, PresetByName) {
  for (const char* name : {"gpt-oss-20b", "gpt-oss-120b", "tiny"}) {
    const MoeConfig c = MoeConfig::preset(name);
    EXPECT_EQ(c.name, name);
  }
  EXPECT_EQ(MoeConfig::preset("gpt-oss-120b").num_experts, 128);
  EXPECT_EQ(MoeConfig::preset("tiny").hidden, 64);
  const std::string message = error_of([] { MoeConfig::preset("nope"); });
  for (const char* part : {"nope", "gpt-oss-20b", "gpt-oss-120b", "tiny"}) expect_contains(message, part);
}

TEST(Config, ValidateRejects) {
  struct Case {
    const char* what;
    std::function<void(MoeConfig&)> edit;
    std::vector<std::string> parts;  // the message names the field and the value
  };
  const std::vector<Case> cases = {
      {"k > E", [](MoeConfig& c) { c.num_experts = 4, c.top_k = 5; }, {"top_k", "5", "[1, 4]"}},
      {"k > 8", [](MoeConfig& c) { c.num_experts = 64, c.top_k = 9; }, {"top_k", "9", "[1, 8]"}},
      {"k = 0", [](MoeConfig& c) { c.top_k = 0; }, {"top_k", "0"}},
      {"E = 0", [](MoeConfig& c) { c.num_experts = 0; }, {"num_experts", "0", "256"}},
      {"E = 300", [](MoeConfig& c) { c.num_experts = 300; }, {"num_experts", "300", "256"}},
      {"H % 32", [](MoeConfig& c) { c.hidden = 48; }, {"hidden", "48", "32"}},
      {"H < 0", [](MoeConfig& c) { c.hidden = -32; }, {"hidden", "-32"}},
      {"H too large", [](MoeConfig& c) { c.hidden = 65536 + 32; }, {"hidden", "65568", "65536"}},
      {"I too large", [](MoeConfig& c) { c.intermediate = 1 << 30; }, {"intermediate", "65536"}},
      {"I = 0", [](MoeConfig& c) { c.intermediate = 0; }, {"intermediate", "0"}},
      {"I % 32", [](MoeConfig& c) { c.intermediate = 2888; }, {"intermediate", "2888"}},
      {"limit = 0", [](MoeConfig& c) { c.swiglu_limit = 0.0f; }, {"swiglu_limit"}},
      {"limit < 0", [](MoeConfig& c) { c.swiglu_limit = -7.0f; }, {"swiglu_limit", "-7"}},
      {"limit inf", [](MoeConfig& c) { c.swiglu_limit = std::numeric_limits<float>::infinity(); }, {"swiglu_limit"}},
      {"limit NaN", [](MoeConfig& c) { c.swiglu_limit = std::nanf(""); }, {"swiglu_limit"}},
      {"alpha NaN", [](MoeConfig& c) { c.swiglu_alpha = std::nanf(""); }, {"swiglu_alpha"}},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    MoeConfig c = MoeConfig::tiny();
    k.edit(c);
    const std::string message = error_of([&] { c.validate(); });
    for (const auto& part : k.parts) expect_contains(message, part);
  }
}

TEST(Config, ValidateAcceptsEdges) {
  EXPECT_NO_THROW(make_config(1, 1, 32, 32).validate());
  EXPECT_NO_THROW(make_config(256, 8, 32, 32).validate());
  EXPECT_NO_THROW(make_config(3, 3, 96, 160).validate());
  MoeConfig c = MoeConfig::tiny();
  c.routing = RoutingOrder::SoftmaxThenTopk;
  c.renormalize = true;
  c.swiglu_alpha = -1.0f;  // any finite alpha
  EXPECT_NO_THROW(c.validate());
}

TEST(Config, RoutingOrderNames) {
  EXPECT_EQ(mxmoe::to_string(RoutingOrder::TopkThenSoftmax), "topk_then_softmax");
  EXPECT_EQ(mxmoe::to_string(RoutingOrder::SoftmaxThenTopk), "softmax_then_topk");
}

// --- weights ----------------------------------------------------------------------------------

TEST(Weights, ValidateNamesTensorAndCounts) {
  const MoeConfig c = make_config(3, 2, 64, 96);
  const MoeLayerData d = MoeLayerData::random(c, 11, true);
  // [E, 2I, H/32, 16] = 3 * 192 * 2 * 16 and so on.
  EXPECT_EQ(d.w1_blocks.size(), 3u * 192 * 2 * 16);
  EXPECT_EQ(d.w1_scales.size(), 3u * 192 * 2);
  EXPECT_EQ(d.w1_bias.size(), 3u * 192);
  EXPECT_EQ(d.w2_blocks.size(), 3u * 64 * 3 * 16);
  EXPECT_EQ(d.w2_scales.size(), 3u * 64 * 3);
  EXPECT_EQ(d.w2_bias.size(), 3u * 64);
  EXPECT_EQ(d.router_weight.size(), 3u * 64);
  EXPECT_EQ(d.router_bias.size(), 3u);
  const MoeWeights w = d.view();
  EXPECT_NO_THROW(w.validate(c));
  EXPECT_EQ(w.w1_blocks.data(), d.w1_blocks.data());
  EXPECT_EQ(w.w2_bias.size(), d.w2_bias.size());

  struct Case {
    const char* tensor;
    std::function<void(MoeWeights&)> edit;
    std::string expected, actual;
  };
  const std::vector<Case> cases = {
      {"w1_blocks", [](MoeWeights& v) { v.w1_blocks = v.w1_blocks.first(100); }, "18432", "100"},
      {"w1_scales", [](MoeWeights& v) { v.w1_scales = {}; }, "1152", "got 0"},
      {"w1_bias", [](MoeWeights& v) { v.w1_bias = v.w1_bias.first(7); }, "576", "7"},
      {"w2_blocks", [](MoeWeights& v) { v.w2_blocks = v.w2_blocks.subspan(16); }, "9216", "9200"},
      {"w2_scales", [](MoeWeights& v) { v.w2_scales = v.w2_scales.first(575); }, "576", "575"},
      {"w2_bias", [](MoeWeights& v) { v.w2_bias = v.w2_bias.first(191); }, "192", "191"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.tensor);
    MoeWeights bad = w;
    k.edit(bad);
    const std::string message = error_of([&] { bad.validate(c); });
    expect_contains(message, k.tensor);
    expect_contains(message, k.expected);
    expect_contains(message, k.actual);
  }
  // Weights of another shape are caught too.
  expect_contains(error_of([&] { w.validate(make_config(4, 2, 64, 96)); }), "w1_blocks");
  // A bad config is reported as such.
  expect_contains(error_of([&] { w.validate(make_config(3, 2, 64, 90)); }), "intermediate");
}

TEST(Weights, EmptyBiasMeansNoBias) {
  const MoeConfig c = MoeConfig::tiny();
  const MoeLayerData d = MoeLayerData::random(c, 5, false);
  EXPECT_TRUE(d.w1_bias.empty());
  EXPECT_TRUE(d.w2_bias.empty());
  EXPECT_FALSE(d.router_weight.empty());
  EXPECT_NO_THROW(d.view().validate(c));
}

double bf16_value(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

// Dequantised std of one weight tensor, with an own e2m1 table and scale decoding.
double dequantised_std(const std::vector<uint8_t>& blocks, const std::vector<uint8_t>& scales) {
  static constexpr double kMagnitude[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
  double sum = 0.0, sum_sq = 0.0;
  for (size_t i = 0; i < 2 * blocks.size(); ++i) {
    const uint8_t byte = blocks[i / 2];
    const uint8_t code = (i % 2 == 0) ? (byte & 0xF) : (byte >> 4);
    const double v = ((code & 8) ? -1.0 : 1.0) * kMagnitude[code & 7] * std::ldexp(1.0, scales[i / 32] - 127);
    sum += v;
    sum_sq += v * v;
  }
  const double n = static_cast<double>(2 * blocks.size());
  return std::sqrt(sum_sq / n - (sum / n) * (sum / n));
}

double bf16_std(const std::vector<uint16_t>& values) {
  double sum = 0.0, sum_sq = 0.0;
  for (uint16_t b : values) {
    sum += bf16_value(b);
    sum_sq += bf16_value(b) * bf16_value(b);
  }
  const double n = static_cast<double>(values.size());
  return std::sqrt(sum_sq / n - (sum / n) * (sum / n));
}

TEST(Weights, RandomIsCheckpointLike) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed = " + std::to_string(seed));
  const MoeConfig c = make_config(4, 2, 256, 1024);
  const MoeLayerData d = MoeLayerData::random(c, seed, true);
  // Weights: std ~ 1/sqrt(K) for K = H (W1) and K = I (W2).
  EXPECT_NEAR(dequantised_std(d.w1_blocks, d.w1_scales) * std::sqrt(256.0), 1.0, 0.35);
  EXPECT_NEAR(dequantised_std(d.w2_blocks, d.w2_scales) * std::sqrt(1024.0), 1.0, 0.35);
  // Every e2m1 code appears, and scales stay finite (never the 0xFF NaN byte).
  std::vector<int> code_count(16, 0);
  for (uint8_t b : d.w1_blocks) ++code_count[b & 0xF], ++code_count[b >> 4];
  for (int code = 0; code < 16; ++code) EXPECT_GT(code_count[static_cast<size_t>(code)], 0) << code;
  for (uint8_t s : d.w1_scales) ASSERT_NE(s, 0xFF);
  // Biases ~0.1, router ~1/sqrt(H).
  EXPECT_NEAR(bf16_std(d.w1_bias), 0.1, 0.03);
  EXPECT_NEAR(bf16_std(d.w2_bias), 0.1, 0.03);
  EXPECT_NEAR(bf16_std(d.router_weight) * std::sqrt(256.0), 1.0, 0.2);
  EXPECT_EQ(d.router_bias.size(), 4u);

  // Same seed, same layer; another seed, another layer.
  const MoeLayerData again = MoeLayerData::random(c, seed, true);
  EXPECT_EQ(again.w1_blocks, d.w1_blocks);
  EXPECT_EQ(again.w2_scales, d.w2_scales);
  EXPECT_EQ(again.router_weight, d.router_weight);
  const MoeLayerData other = MoeLayerData::random(c, seed + 1, true);
  EXPECT_NE(other.w1_blocks, d.w1_blocks);
}

TEST(Weights, RandomRejectsBadConfig) {
  expect_contains(error_of([] { MoeLayerData::random(make_config(4, 5, 64, 64), 1); }), "top_k");
}

}  // namespace
