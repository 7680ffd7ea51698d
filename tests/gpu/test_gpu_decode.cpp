// The fused decode path (kernels/gemv/decode.hpp) against the fp64 CPU reference: odd shapes, empty
// blocks, one expert taking every token, 64 pairs, wide scales, both ring depths; determinism and
// graph replay; and the GEMV path at the same sizes when the decode path is switched off.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "gpu/gpu_test_support.hpp"
#include "kernels/gemv/gemv.hpp"

namespace mxmoe::test {
namespace {


struct DecodeCase {
  const char* name;
  int experts, top_k, hidden, intermediate;
  int64_t tokens;
  bool one_expert = false;
  bool with_bias = true;
  bool wide_scales = false;
  const char* stages = "2";
};

class GpuDecode : public ::testing::TestWithParam<DecodeCase> {};

TEST_P(GpuDecode, MatchesReference) {
  MXMOE_SKIP_WITHOUT_GPU();
  const DecodeCase c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const MoeConfig cfg = make_config(c.experts, c.top_k, c.hidden, c.intermediate);
  MoeLayerData layer = MoeLayerData::random(cfg, seed, c.with_bias);
  if (c.wide_scales) lift_some_scales(layer);
  const auto hidden = random_hidden(c.tokens, cfg.hidden, rng);
  auto logits = random_logits(c.tokens, cfg.num_experts, rng);
  if (c.one_expert) route_every_token_to_one_expert(logits, c.tokens, cfg.num_experts);
  std::vector<double> ref(static_cast<size_t>(c.tokens * cfg.hidden));
  reference_moe_f64(cfg, layer.view(), hidden, logits, c.tokens, ref);

  if (!gemv::stages_built(std::atoi(c.stages))) GTEST_SKIP() << c.stages << " ring stages are not built in this profile";
  for (const char* decode_tokens : {"8", "0"}) {
    SCOPED_TRACE(std::string("MXMOE_DECODE_TOKENS=") + decode_tokens + " MXMOE_GEMV_STAGES=" + c.stages);
    const ScopedEnv knob("MXMOE_DECODE_TOKENS", decode_tokens);
    const ScopedEnv stages("MXMOE_GEMV_STAGES", c.stages);
    const MoeRunner runner(cfg, layer.view(), gemv_options(c.tokens));
    const bool fused = runner.describe_plan(c.tokens).find("fused decode") != std::string::npos;
    EXPECT_EQ(fused, std::string(decode_tokens) == "8") << runner.describe_plan(c.tokens);
    const auto out = run_on_gpu(runner, hidden, logits, c.tokens);
    const ErrorStats s = compare(out, ref);
    EXPECT_EQ(s.nan_count, 0) << "unwritten or non-finite outputs";
    EXPECT_LE(s.rel, 1e-2) << "relative error; worst element " << s.worst << " abs error " << s.max_abs;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GpuDecode,
    ::testing::Values(DecodeCase{"t1_e128_2880", 128, 4, 2880, 2880, 1},
                      DecodeCase{"t2_e128_2880_3stages", 128, 4, 2880, 2880, 2, false, true, false, "3"},
                      DecodeCase{"t4_e32_2880", 32, 4, 2880, 2880, 4},
                      DecodeCase{"t8_e32_2880_nobias", 32, 4, 2880, 2880, 8, false, false},
                      DecodeCase{"t8_e256_k8", 256, 8, 256, 192, 8},
                      DecodeCase{"t5_one_expert", 8, 2, 256, 192, 5, true},
                      DecodeCase{"t3_odd_k", 5, 3, 96, 160, 3},
                      DecodeCase{"t1_fewer_units_than_blocks", 4, 2, 64, 32, 1},
                      DecodeCase{"t7_hidden_3072", 16, 4, 3072, 224, 7},
                      DecodeCase{"t6_wide_scales", 16, 4, 384, 256, 6, false, true, true}),
    [](const auto& info) { return std::string(info.param.name); });

// Two eager runs and a graph replay of the decode path give the same bits.
TEST(GpuDecodeDeterminism, EagerTwiceAndGraphReplayAgree) {
  MXMOE_SKIP_WITHOUT_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const MoeConfig cfg = MoeConfig::gpt_oss_120b();
  const MoeLayerData layer = MoeLayerData::random(cfg, seed);
  const ScopedEnv knob("MXMOE_DECODE_TOKENS", "8");
  const MoeRunner runner(cfg, layer.view(), gemv_options(8));
  for (const int64_t tokens : {1, 3}) {
    SCOPED_TRACE("T = " + std::to_string(tokens));
    const auto hidden = random_hidden(tokens, cfg.hidden, rng);
    const auto logits = random_logits(tokens, cfg.num_experts, rng);
    const auto first = run_on_gpu(runner, hidden, logits, tokens);
    ASSERT_EQ(first, run_on_gpu(runner, hidden, logits, tokens)) << "two eager runs differ";
    EXPECT_EQ(first, run_graph_replay(runner, hidden, logits, tokens)) << "graph replay differs from eager";
  }
}

TEST(GpuDecodeErrors, RejectsAnUnknownTokenLimit) {
  MXMOE_SKIP_WITHOUT_GPU();
  const MoeConfig cfg = MoeConfig::tiny();
  const MoeLayerData layer = MoeLayerData::random(cfg, fresh_seed());
  const ScopedEnv knob("MXMOE_DECODE_TOKENS", "9");
  expect_error_naming([&] { MoeRunner(cfg, layer.view(), gemv_options(4)); }, "MXMOE_DECODE_TOKENS");
}

}  // namespace
}  // namespace mxmoe::test
