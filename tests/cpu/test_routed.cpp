// MoeRunner::forward_routed on the reference backend: routed by the reference's own routing it gives
// forward()'s bits (int32 and int64 ids, both routing orders, T = 0, 1, 3, 1000, one expert taking
// every token), the weights are used as given, and bad ids, weights and arguments are Errors naming them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "mxmoe/formats.hpp"
#include "mxmoe/reference.hpp"
#include "mxmoe/runner.hpp"
#include "reference/routed_reference.hpp"
#include "test_support.hpp"

namespace mxmoe::test {
namespace {

struct Inputs {
  std::vector<uint16_t> hidden;
  std::vector<float> logits;
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

// Random hidden states and logits, and the reference's routing of them.
Inputs make_inputs(const MoeConfig& cfg, int64_t tokens, std::mt19937_64& rng, bool one_expert = false) {
  Inputs in;
  std::normal_distribution<float> dist;
  in.hidden.resize(static_cast<size_t>(tokens * cfg.hidden));
  for (auto& h : in.hidden) h = float_to_bf16(dist(rng));
  in.logits.resize(static_cast<size_t>(tokens * cfg.num_experts));
  for (auto& l : in.logits) l = 2.f * dist(rng);
  if (one_expert)
    for (int64_t t = 0; t < tokens; ++t) in.logits[static_cast<size_t>(t * cfg.num_experts + 3)] += 100.f;
  in.ids.resize(static_cast<size_t>(tokens * cfg.top_k));
  in.weights.resize(in.ids.size());
  reference_route(cfg, in.logits, tokens, in.ids, in.weights);
  return in;
}

std::vector<uint16_t> poisoned(size_t n) { return std::vector<uint16_t>(n, 0x7FC1); }

std::vector<float> with_weight_nan_at(std::vector<float> w, size_t p) {
  w[p] = std::numeric_limits<float>::quiet_NaN();
  return w;
}

TEST(Routed, ReferenceRoutedByItsOwnRoutingGivesTheLogitsForwardsBits) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (const bool softmax_first : {false, true}) {
    MoeConfig cfg = make_config(5, 3, 96, 160);  // K not a multiple of 128, odd k
    if (softmax_first) cfg.routing = RoutingOrder::SoftmaxThenTopk;  // weights that do not sum to 1
    const MoeLayerData layer = MoeLayerData::random(cfg, seed);
    const MoeRunner runner(cfg, layer.view(), reference_options(1000));
    for (const int64_t tokens : {0, 1, 3, 1000}) {
      for (const bool one_expert : {false, true}) {
        SCOPED_TRACE("T = " + std::to_string(tokens) + (one_expert ? ", one expert takes every token" : "") +
                     (softmax_first ? ", softmax first" : ""));
        const Inputs in = make_inputs(cfg, tokens, rng, one_expert);
        const size_t n = in.hidden.size();
        auto want = poisoned(n), got32 = poisoned(n), got64 = poisoned(n);
        runner.forward(in.hidden.data(), in.logits.data(), tokens, want.data(), nullptr, 0);
        runner.forward_routed(in.hidden.data(), in.ids.data(), in.weights.data(), tokens, got32.data(), nullptr, 0);
        const std::vector<int64_t> ids64(in.ids.begin(), in.ids.end());
        runner.forward_routed(in.hidden.data(), ids64.data(), in.weights.data(), tokens, got64.data(), nullptr, 0);
        EXPECT_EQ(got32, want);
        EXPECT_EQ(got64, want);
        if (one_expert && tokens > 0) {  // expert 3 takes every token, some experts none
          for (int64_t t = 0; t < tokens; ++t) ASSERT_EQ(in.ids[static_cast<size_t>(t * cfg.top_k)], 3);
        }
      }
    }
  }
}

// The weights are used as given: doubled weights double every output exactly (fp64 sums, then one
// bf16 rounding), and all-zero weights give zeros (a renormalisation would divide by zero).
TEST(Routed, WeightsAreUsedAsGiven) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const MoeConfig cfg = make_config(8, 2, 64, 96);
  const MoeLayerData layer = MoeLayerData::random(cfg, seed);
  const MoeRunner runner(cfg, layer.view(), reference_options(17));
  const Inputs in = make_inputs(cfg, 17, rng);
  const size_t n = in.hidden.size();
  auto base = poisoned(n), doubled = poisoned(n), zero = poisoned(n);
  runner.forward_routed(in.hidden.data(), in.ids.data(), in.weights.data(), 17, base.data(), nullptr, 0);
  std::vector<float> w2 = in.weights, w0(in.weights.size(), 0.f);
  for (auto& w : w2) w *= 2.f;
  runner.forward_routed(in.hidden.data(), in.ids.data(), w2.data(), 17, doubled.data(), nullptr, 0);
  runner.forward_routed(in.hidden.data(), in.ids.data(), w0.data(), 17, zero.data(), nullptr, 0);
  int nonzero = 0;
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(bf16_to_float(doubled[i]), 2.f * bf16_to_float(base[i])) << "element " << i;
    ASSERT_EQ(bf16_to_float(zero[i]), 0.f) << "element " << i;
    nonzero += bf16_to_float(base[i]) != 0.f;
  }
  EXPECT_GT(nonzero, static_cast<int>(n / 2));
}

// Ids of -1 drop their pairs: the output equals the same routing with each dropped pair's weight 0
// (an exact zero added in fp64), bit for bit; a token whose pairs are all dropped is zero; int64 -1 too.
TEST(Routed, DroppedPairsAddNothing) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const MoeConfig cfg = make_config(7, 3, 96, 160);
  const MoeLayerData layer = MoeLayerData::random(cfg, seed);
  const MoeRunner runner(cfg, layer.view(), reference_options(50));
  for (const int64_t tokens : {1, 3, 50}) {
    SCOPED_TRACE("T = " + std::to_string(tokens));
    const Inputs in = make_inputs(cfg, tokens, rng);
    std::vector<int32_t> dropped = in.ids;
    std::vector<float> zeroed = in.weights, nan_weights = in.weights;
    std::bernoulli_distribution drop(0.4);
    for (size_t p = 0; p < dropped.size(); ++p)
      if (drop(rng) || p < static_cast<size_t>(cfg.top_k)) {  // token 0: every pair
        dropped[p] = kDroppedPairId;
        zeroed[p] = 0.f;
        nan_weights[p] = std::numeric_limits<float>::quiet_NaN();
      }
    const size_t n = in.hidden.size();
    auto want = poisoned(n), got = poisoned(n), got64 = poisoned(n);
    runner.forward_routed(in.hidden.data(), in.ids.data(), zeroed.data(), tokens, want.data(), nullptr, 0);
    runner.forward_routed(in.hidden.data(), dropped.data(), nan_weights.data(), tokens, got.data(), nullptr, 0);
    const std::vector<int64_t> ids64(dropped.begin(), dropped.end());
    runner.forward_routed(in.hidden.data(), ids64.data(), nan_weights.data(), tokens, got64.data(), nullptr, 0);
    EXPECT_EQ(got, want);
    EXPECT_EQ(got64, want);
    for (int64_t j = 0; j < cfg.hidden; ++j) ASSERT_EQ(bf16_to_float(got[static_cast<size_t>(j)]), 0.f) << j;
  }
}

TEST(Routed, BadIdsWeightsAndArgumentsAreErrorsNamingThem) {
  const MoeConfig cfg = MoeConfig::tiny();  // E = 8, k = 2
  const MoeLayerData layer = MoeLayerData::random(cfg, 5);
  const MoeRunner runner(cfg, layer.view(), reference_options(4));
  std::vector<uint16_t> hidden(3 * 64, 0x3F80), out(3 * 64);
  const std::vector<int32_t> ids = {0, 1, 7, 2, 4, 5};
  const std::vector<float> weights = {0.6f, 0.4f, 0.5f, 0.5f, 1.f, 0.f};
  auto run = [&](std::vector<int32_t> i, std::vector<float> w) {
    runner.forward_routed(hidden.data(), i.data(), w.data(), 3, out.data(), nullptr, 0);
  };
  run(ids, weights);  // valid
  auto with_id = [&](size_t p, int32_t v) {
    std::vector<int32_t> i = ids;
    i[p] = v;
    return i;
  };
  expect_error_naming([&] { run(with_id(3, 8), weights); }, "topk_ids[1, 1] = 8: expected an expert id in [0, 8)");
  expect_error_naming([&] { run(with_id(4, -2), weights); }, "topk_ids[2, 0] = -2");
  run(with_id(4, kDroppedPairId), with_weight_nan_at(weights, 4));  // dropped: its weight is never read
  expect_error_naming([&] { run(with_id(1, 0), weights); }, "topk_ids: token 0 names expert 0 twice (slots 0 and 1)");
  auto with_weight = [&](size_t p, float v) {
    std::vector<float> w = weights;
    w[p] = v;
    return w;
  };
  expect_error_naming([&] { run(ids, with_weight(2, -0.5f)); },
                      "topk_weights[1, 0] = -0.5: expected a finite weight >= 0");
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  expect_error_naming([&] { run(ids, with_weight(5, nan)); }, "topk_weights[2, 1]");
  expect_error_naming([&] { run(ids, with_weight(0, inf)); }, "topk_weights[0, 0]");
  // int64 ids: out of int32's range too.
  std::vector<int64_t> ids64(ids.begin(), ids.end());
  ids64[2] = int64_t{1} << 40;
  // A call with one argument replaced.
  const int32_t* no_ids = nullptr;
  auto call = [&](const uint16_t* h, const auto* i, const float* w, int64_t t, uint16_t* o) {
    runner.forward_routed(h, i, w, t, o, nullptr, 0);
  };
  expect_error_naming([&] { call(hidden.data(), ids64.data(), weights.data(), 3, out.data()); },
                      "topk_ids[1, 0] = 1099511627776: expected an expert id in [0, 8)");
  // Pointers and sizes.
  expect_error_naming([&] { call(hidden.data(), no_ids, weights.data(), 3, out.data()); }, "topk_ids: null pointer");
  expect_error_naming([&] { call(hidden.data(), ids.data(), nullptr, 3, out.data()); }, "topk_weights: null pointer");
  expect_error_naming([&] { call(nullptr, ids.data(), weights.data(), 3, out.data()); }, "hidden: null pointer");
  expect_error_naming([&] { call(hidden.data(), ids.data(), weights.data(), 3, nullptr); }, "out: null pointer");
  expect_error_naming([&] { call(hidden.data(), ids.data(), weights.data(), 5, out.data()); }, "max_tokens");
  expect_error_naming([&] { call(hidden.data(), ids.data(), weights.data(), -1, out.data()); }, "tokens");
  // T = 0 reads nothing: null pointers are fine there.
  call(nullptr, no_ids, nullptr, 0, nullptr);
}

// The routed reference's own checks (the oracle of the GPU tests): sizes, and the logits path is the
// routed path after reference_route.
TEST(Routed, RoutedReferenceChecksItsInputs) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const MoeConfig cfg = make_config(6, 4, 64, 64);
  const MoeLayerData layer = MoeLayerData::random(cfg, seed);
  const Inputs in = make_inputs(cfg, 3, rng);
  std::vector<double> want(in.hidden.size()), got(in.hidden.size());
  reference_moe_f64(cfg, layer.view(), in.hidden, in.logits, 3, want);
  reference_moe_routed_f64(cfg, layer.view(), in.hidden, in.ids, in.weights, 3, got);
  EXPECT_EQ(got, want);
  const std::vector<int32_t> short_ids(in.ids.begin(), in.ids.end() - 1);
  expect_error_naming([&] { reference_moe_routed_f64(cfg, layer.view(), in.hidden, short_ids, in.weights, 3, got); },
                      "topk_ids: 11 elements, expected 12");
  const std::vector<float> short_weights(in.weights.begin(), in.weights.end() - 1);
  expect_error_naming([&] { reference_moe_routed_f64(cfg, layer.view(), in.hidden, in.ids, short_weights, 3, got); },
                      "topk_weights: 11 elements, expected 12");
}

}  // namespace
}  // namespace mxmoe::test
