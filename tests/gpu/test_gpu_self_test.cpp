// The block-scaled path's self-test gate (moe/mx_self_test.hpp): the atom this GPU runs passes it, a
// planted wrong atom fails it, and a runner whose gate failed falls back to W4A16, saying so once.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <iostream>
#include <random>
#include <string>

#include "gpu/gpu_test_support.hpp"
#include "moe/mx_self_test.hpp"

namespace mxmoe::test {
namespace {

int cc_major() { return code_cc() / 10; }

// Clears the planted fault (and the gate's cache) however a test ends.
struct PlantedFault {
  PlantedFault() { plant_mx_self_test_fault(true); }
  ~PlantedFault() { plant_mx_self_test_fault(false); }
};

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(MxSelfTest, TheAtomOfThisGpuPasses) {
  MXMOE_SKIP_WITHOUT_GPU();
  MXMOE_SKIP_WITHOUT_MX_ATOMS();
  const mma::MxAtom atom = cc_major() == 12 ? mma::MxAtom::Native : mma::MxAtom::Emulated;
  const MxSelfTest r = run_mx_self_test(atom);
  ASSERT_TRUE(r.ran) << r.to_string();
  EXPECT_TRUE(r.passed) << r.to_string();
  // The MXFP8 quantisation separates the path from W4A16 by a few percent, never by nothing: a test
  // that compared the W4A16 path with itself would read 0 here.
  EXPECT_GT(r.rel_to_w4a16, 1e-3) << r.to_string();
  std::cout << "self-test: " << r.to_string() << "\n";
}

TEST(MxSelfTest, APlantedWrongAtomFails) {
  MXMOE_SKIP_WITHOUT_GPU();
  MXMOE_SKIP_WITHOUT_MX_ATOMS();
  const MxSelfTest r = run_mx_self_test(mma::MxAtom::PlantedFault);
  ASSERT_TRUE(r.ran) << r.to_string();
  EXPECT_FALSE(r.passed) << r.to_string();
  EXPECT_GT(r.rel_to_mx_reference, 10 * kSelfTestMxBound) << r.to_string();
  EXPECT_NE(r.to_string().find("FAILED"), std::string::npos) << r.to_string();
  std::cout << "planted fault: " << r.to_string() << "\n";
}

TEST(MxSelfTest, TheRunnerFallsBackToW4a16WhenTheGateFails) {
  MXMOE_SKIP_WITHOUT_GPU();
  MXMOE_SKIP_WITHOUT_MX_ATOMS();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  MoeConfig cfg = MoeConfig::tiny();
  cfg.hidden = 320, cfg.intermediate = 160;  // K not a multiple of 128
  const MoeLayerData layer = MoeLayerData::random(cfg, seed);
  const int64_t tokens = 29;
  const auto hidden = random_hidden(tokens, cfg.hidden, rng);
  const auto logits = random_logits(tokens, cfg.num_experts, rng);
  std::vector<double> ref(static_cast<size_t>(tokens * cfg.hidden));
  reference_moe_f64(cfg, layer.view(), hidden, logits, tokens, ref);
  {
    const PlantedFault planted;
    testing::internal::CaptureStderr();
    const MoeRunner first(cfg, layer.view(), gemv_options(tokens, Backend::MxEmulated));
    const MoeRunner second(cfg, layer.view(), gemv_options(tokens, Backend::MxEmulated));
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(first.backend(), Backend::Auto) << "the gate failed but the runner kept the MX backend";
    EXPECT_EQ(second.backend(), Backend::Auto);
    EXPECT_EQ(occurrences(err, "failed its self-test"), 1u) << err;
    EXPECT_NE(err.find("Please report"), std::string::npos) << err;
    const std::string plan = first.describe_plan(tokens);
    EXPECT_EQ(plan.find("mx "), std::string::npos) << plan;
    const ErrorStats s = compare(run_on_gpu(first, hidden, logits, tokens), ref);
    EXPECT_EQ(s.nan_count, 0);
    EXPECT_LE(s.rel, 1e-2) << "the W4A16 fallback against the fp64 reference";
  }
  // Without the fault the gate passes and the runner keeps the backend asked for.
  const MoeRunner runner(cfg, layer.view(), gemv_options(tokens, Backend::MxEmulated));
  EXPECT_EQ(runner.backend(), Backend::MxEmulated);
  EXPECT_NE(runner.describe_plan(tokens).find("mx emulated"), std::string::npos) << runner.describe_plan(tokens);
}

TEST(MxSelfTest, ProbeReportsIt) {
  MXMOE_SKIP_WITHOUT_GPU();
  MXMOE_SKIP_WITHOUT_MX_ATOMS();
  const std::string report = mx_self_test_report(0);
  EXPECT_EQ(report.rfind("passed (", 0), 0u) << report;
  EXPECT_NE(report.find(cc_major() == 12 ? "native atom" : "emulated atom"), std::string::npos) << report;
  EXPECT_THROW(mx_self_test_report(-1), Error);
}

}  // namespace
}  // namespace mxmoe::test
