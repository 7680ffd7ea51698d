// MoeRunner on the CPU: the reference backend through the runner matches reference_moe, and every
// misuse is an mxmoe::Error naming the argument.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <vector>

#include "mxmoe/device.hpp"
#include "mxmoe/formats.hpp"
#include "mxmoe/reference.hpp"
#include "mxmoe/runner.hpp"
#include "test_support.hpp"

namespace mxmoe::test {
namespace {

TEST(Runner, ReferenceBackendMatchesReferenceMoe) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const MoeConfig cfg = make_config(5, 3, 96, 160);
  const MoeLayerData layer = MoeLayerData::random(cfg, seed);
  const int64_t tokens = 7;
  std::normal_distribution<float> dist;
  std::vector<uint16_t> hidden(static_cast<size_t>(tokens * cfg.hidden));
  for (auto& h : hidden) h = float_to_bf16(dist(rng));
  std::vector<float> logits(static_cast<size_t>(tokens * cfg.num_experts));
  for (auto& l : logits) l = dist(rng);
  const MoeRunner runner(cfg, layer.view(), reference_options(8));
  EXPECT_EQ(runner.backend(), Backend::Reference);
  EXPECT_FALSE(runner.on_gpu());
  EXPECT_EQ(runner.workspace_bytes(), 0u);
  std::vector<uint16_t> out(hidden.size(), 0xFFFF), want(hidden.size());
  runner.forward(hidden.data(), logits.data(), tokens, out.data(), nullptr, 0);
  reference_moe(cfg, layer.view(), hidden, logits, tokens, want);
  EXPECT_EQ(out, want);
}

// Precision::Fp8 on the reference backend: the W4A8 numerics (reference_numerics says which), which
// differ from bf16's; a W4A16 backend refuses fp8 by name, and an unknown precision name is an Error.
TEST(Runner, Fp8OnTheReferenceRunsTheW4a8Numerics) {
  const MoeConfig cfg = MoeConfig::tiny();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const MoeLayerData layer = MoeLayerData::random(cfg, seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist;
  const int64_t tokens = 5;
  std::vector<uint16_t> hidden(static_cast<size_t>(tokens * cfg.hidden));
  for (auto& h : hidden) h = float_to_bf16(dist(rng));
  std::vector<float> logits(static_cast<size_t>(tokens * cfg.num_experts));
  for (auto& l : logits) l = dist(rng);
  RunnerOptions options = reference_options(8);
  options.precision = Precision::Fp8;
  const MoeRunner fp8(cfg, layer.view(), options);
  EXPECT_EQ(fp8.precision(), Precision::Fp8);
  const ReferenceOptions numerics = fp8.reference_numerics();
  EXPECT_TRUE(numerics.fp8_weights && numerics.fp8_gemm1_input && numerics.fp8_gemm2_input);
  EXPECT_FALSE(numerics.mxfp8_gemm1_input || numerics.mxfp8_gemm2_input);
  std::vector<uint16_t> out(hidden.size(), 0xFFFF), want(hidden.size()), bf16(hidden.size());
  fp8.forward(hidden.data(), logits.data(), tokens, out.data(), nullptr, 0);
  reference_moe(cfg, layer.view(), hidden, logits, tokens, want, numerics);
  reference_moe(cfg, layer.view(), hidden, logits, tokens, bf16);
  EXPECT_EQ(out, want);
  EXPECT_NE(out, bf16) << "e4m3 activations should show";
  const MoeRunner plain(cfg, layer.view(), reference_options(8));
  EXPECT_EQ(plain.precision(), Precision::Bf16);
  EXPECT_FALSE(plain.reference_numerics().fp8_gemm1_input);
  for (const Backend b : {Backend::Gemv, Backend::Mma}) {
    RunnerOptions w4a16 = options;
    w4a16.backend = b;
    expect_error_naming([&] { MoeRunner r(cfg, layer.view(), w4a16); }, "precision");
  }
  // W4A8 scales GEMM2's input by the clamped SwiGLU's bound, which needs alpha > 0.
  MoeConfig unbounded = cfg;
  unbounded.swiglu_alpha = -1.f;
  expect_error_naming([&] { MoeRunner r(unbounded, layer.view(), options); }, "swiglu_alpha");
  ReferenceOptions w4a8;
  w4a8.fp8_gemm2_input = true;
  expect_error_naming([&] { reference_moe(unbounded, layer.view(), hidden, logits, tokens, want, w4a8); },
                      "swiglu_alpha");
  EXPECT_EQ(parse_precision("FP8"), Precision::Fp8);
  expect_error_naming([] { (void)parse_precision("fp16"); }, "precision");
}

TEST(Runner, RejectsMisuse) {
  const MoeConfig cfg = MoeConfig::tiny();
  const MoeLayerData layer = MoeLayerData::random(cfg, 3);
  const MoeRunner runner(cfg, layer.view(), reference_options(4));
  std::vector<uint16_t> hidden(5 * 64, 0x3F80), out(5 * 64);
  std::vector<float> logits(5 * 8, 0.5f);
  expect_error_naming([&] { runner.forward(hidden.data(), logits.data(), 5, out.data(), nullptr, 0); }, "max_tokens");
  expect_error_naming([&] { runner.forward(hidden.data(), logits.data(), -1, out.data(), nullptr, 0); }, "tokens");
  expect_error_naming([&] { runner.forward(nullptr, logits.data(), 2, out.data(), nullptr, 0); }, "hidden");
  expect_error_naming([&] { runner.forward(hidden.data(), nullptr, 2, out.data(), nullptr, 0); }, "router_logits");
  expect_error_naming([&] { runner.forward(hidden.data(), logits.data(), 2, nullptr, nullptr, 0); }, "out");
  expect_error_naming([&] { runner.forward_stages(hidden.data(), logits.data(), 2, out.data(), nullptr, 0, nullptr, 0); },
                      "stages");
  expect_error_naming([&] { (void)runner.describe_plan(5); }, "tokens");
  RunnerOptions bad = reference_options(-1);
  expect_error_naming([&] { MoeRunner r(cfg, layer.view(), bad); }, "max_tokens");
  RunnerOptions fewer_routed = reference_options(4);
  fewer_routed.routed_experts = cfg.num_experts - 1;  // fewer than the layer holds
  expect_error_naming([&] { MoeRunner r(cfg, layer.view(), fewer_routed); }, "routed_experts");
  MoeWeights short_weights = layer.view();
  short_weights.w2_scales = short_weights.w2_scales.first(short_weights.w2_scales.size() - 1);
  expect_error_naming([&] { MoeRunner r(cfg, short_weights, reference_options(4)); }, "w2_scales");
}

TEST(Runner, NanScaleBytesAreRejectedUnlessAllowed) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const MoeConfig cfg = make_config(3, 2, 96, 64);
  MoeLayerData layer = MoeLayerData::random(cfg, seed);
  // w2_scales [E, H, I/32]: expert 2, row 7, block 1.
  layer.w2_scales[static_cast<size_t>((2 * cfg.hidden + 7) * (cfg.intermediate / 32) + 1)] = 0xFF;
  expect_error_naming([&] { MoeRunner r(cfg, layer.view(), reference_options(4)); },
                      "w2_scales: scale byte 0xFF (NaN) at expert 2, row 7, block 1");
  MoeLayerData first = MoeLayerData::random(cfg, seed + 1);
  first.w1_scales[5] = 0xFF;  // expert 0, row 1 (H/32 = 3 blocks per row), block 2
  expect_error_naming([&] { MoeRunner r(cfg, first.view(), reference_options(4)); },
                      "w1_scales: scale byte 0xFF (NaN) at expert 0, row 1, block 2");
  // Allowed: the MX semantics, NaN outputs where the block contributes.
  RunnerOptions allow = reference_options(4);
  allow.allow_nan_scales = true;
  const MoeRunner runner(cfg, layer.view(), allow);
  std::vector<uint16_t> hidden(static_cast<size_t>(cfg.hidden), 0x3F80), out(hidden.size(), 0);
  std::vector<float> logits = {0.f, 0.f, 100.f};  // expert 2 (and one other) take the token
  runner.forward(hidden.data(), logits.data(), 1, out.data(), nullptr, 0);
  EXPECT_TRUE(std::isnan(bf16_to_float(out[7])));
  EXPECT_FALSE(std::isnan(bf16_to_float(out[6])));
}

TEST(Runner, MovedFromRunnerIsAnErrorNotACrash) {
  const MoeConfig cfg = MoeConfig::tiny();
  const MoeLayerData layer = MoeLayerData::random(cfg, 4);
  MoeRunner first(cfg, layer.view(), reference_options(2));
  MoeRunner second = std::move(first);
  EXPECT_EQ(second.workspace_bytes(), 0u);
  std::vector<uint16_t> hidden(64, 0x3F80), out(64);
  std::vector<float> logits(8, 0.5f);
  expect_error_naming([&] { (void)first.workspace_bytes(); }, "moved from");  // NOLINT(bugprone-use-after-move)
  expect_error_naming([&] { first.forward(hidden.data(), logits.data(), 1, out.data(), nullptr, 0); }, "moved from");
}

TEST(Runner, BackendNamesAndEnvironment) {
  EXPECT_EQ(parse_backend("GeMv"), Backend::Gemv);
  EXPECT_EQ(parse_backend("reference"), Backend::Reference);
  EXPECT_EQ(parse_backend("MMA"), Backend::Mma);
  expect_error_naming([] { parse_backend("fast"); }, "valid backends are: auto, reference, gemv, mma");
  RunnerOptions o;
  o.backend = Backend::Auto;
  o.use_env = true;
  ASSERT_EQ(setenv("MXMOE_BACKEND", "nope", 1), 0);
  expect_error_naming([&] { resolve_backend(o); }, "MXMOE_BACKEND");
  ASSERT_EQ(setenv("MXMOE_BACKEND", "REFERENCE", 1), 0);
  EXPECT_EQ(resolve_backend(o), Backend::Reference);
  unsetenv("MXMOE_BACKEND");
  EXPECT_EQ(resolve_backend(o), gpu_available() ? Backend::Auto : Backend::Reference);
  EXPECT_EQ(backend_on_gpu(Backend::Auto), true) << "a runner keeps Auto only when it resolved to the GPU planner";
  if (!gpu_available())
    for (const Backend b : {Backend::Gemv, Backend::Mma}) {
      o.backend = b;
      expect_error_naming([&] { resolve_backend(o); }, "needs a CUDA GPU");
    }
}

// The one environment reader: MXMOE_PLAN fills an empty override (never replaces a given one),
// MXMOE_TUNE_FILE an empty path, MXMOE_LOG=plan turns the log on; bad values name the variable.
TEST(Runner, EnvironmentBecomesOptions) {
  RunnerOptions given;
  given.plan = parse_plan_override("ksplit=2");
  ASSERT_EQ(setenv("MXMOE_PLAN", "mma=swap32, stages=3", 1), 0);
  ASSERT_EQ(setenv("MXMOE_TUNE_FILE", "/tmp/table.json", 1), 0);
  ASSERT_EQ(setenv("MXMOE_LOG", "plan", 1), 0);
  const RunnerOptions from_env = with_environment(RunnerOptions{});
  EXPECT_EQ(from_env.plan, parse_plan_override("mma=swap32,stages=3"));
  EXPECT_EQ(from_env.tune_file, "/tmp/table.json");
  EXPECT_TRUE(from_env.log_plan);
  EXPECT_EQ(with_environment(given).plan, given.plan);
  ASSERT_EQ(setenv("MXMOE_PLAN", "ksplit=3", 1), 0);
  expect_error_naming([] { with_environment(RunnerOptions{}); }, "MXMOE_PLAN: ksplit=3 is not valid");
  ASSERT_EQ(setenv("MXMOE_PLAN", "", 1), 0);
  ASSERT_EQ(setenv("MXMOE_LOG", "everything", 1), 0);
  expect_error_naming([] { with_environment(RunnerOptions{}); }, "MXMOE_LOG");
  unsetenv("MXMOE_PLAN");
  unsetenv("MXMOE_TUNE_FILE");
  unsetenv("MXMOE_LOG");
  EXPECT_EQ(with_environment(RunnerOptions{}).plan, PlanOverride{});
}

}  // namespace
}  // namespace mxmoe::test
