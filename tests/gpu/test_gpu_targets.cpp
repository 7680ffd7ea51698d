// SM120/SM121 and SM80/SM89 targets' plans executed as a whole on the Hopper at hand
// (RunnerOptions::target): the planner plans for the target (no wgmma, no clusters, its shared memory
// and SM count), the runner launches exactly that plan (the native MX atom replaced by the emulated
// one), and a plan for fewer SMs runs in a green context of that many (a GB10's 48, an A100's 108).
// Against the fp64 reference at T = 0, 1, 3, 64, 1000 and 4096, for W4A16 (auto) and the MXFP8 path
// (mx on SM12x, mx-emulated on SM89). A build of sm_80 code (run through the JIT) runs them with its own
// kernels: the cp.async loaders.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <tuple>

#include "gpu/gpu_test_support.hpp"
#include "moe/green_context.hpp"
#include "plan/device_caps.hpp"

namespace mxmoe::test {
namespace {

class GpuTargetPlan : public ::testing::TestWithParam<std::tuple<std::string, Backend, int64_t>> {};

TEST_P(GpuTargetPlan, RunsAsAWholeAndMatchesTheReference) {
  MXMOE_SKIP_WITHOUT_GPU();
  const auto& [target, backend, tokens] = GetParam();
  if (backend_uses_mxfp8(backend)) MXMOE_SKIP_WITHOUT_MX_ATOMS();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  // gpt-oss-20b's shape for decode sizes; a smaller K for the largest batches (the CPU reference's cost).
  const MoeConfig cfg = tokens <= 64 ? MoeConfig::preset("gpt-oss-20b") : make_config(32, 4, 512, 512);
  const MoeLayerData layer = MoeLayerData::random(cfg, seed, true);
  const auto hidden = random_hidden(tokens, cfg.hidden, rng);
  const auto logits = random_logits(tokens, cfg.num_experts, rng);
  RunnerOptions options = gemv_options(std::max<int64_t>(tokens, 1), backend);
  options.target = target;
  const MoeRunner runner(cfg, layer.view(), options);
  const std::string plan = runner.describe_plan(tokens);
  SCOPED_TRACE("plan: " + plan);
  EXPECT_EQ(plan.find("wgmma"), std::string::npos);
  EXPECT_EQ(plan.find("cluster"), std::string::npos);
  if (backend_uses_mxfp8(backend)) EXPECT_NE(plan.find("mx emulated"), std::string::npos);
  int device_sms = 0;
  MXMOE_CUDA_CHECK(cudaDeviceGetAttribute(&device_sms, cudaDevAttrMultiProcessorCount, 0));
  const int target_sms = plan::target_caps(target).sm_count;
  std::unique_ptr<GreenContext> green;
  if (target_sms < device_sms) {
    green = std::make_unique<GreenContext>(0, target_sms);
    EXPECT_GE(green->sm_count(), target_sms);
    EXPECT_LT(green->sm_count(), device_sms);
  }
  const auto out = run_on_gpu(runner, hidden, logits, tokens, 0xFF, green ? green->stream() : nullptr);
  std::vector<double> ref(static_cast<size_t>(tokens * cfg.hidden));
  ReferenceOptions ro;
  ro.mxfp8_gemm1_input = ro.mxfp8_gemm2_input = backend_uses_mxfp8(backend);
  reference_moe_f64(cfg, layer.view(), hidden, logits, tokens, ref, ro);
  const ErrorStats s = compare(out, ref);
  EXPECT_EQ(s.nan_count, 0) << "unwritten or non-finite outputs";
  EXPECT_LE(s.rel, 1e-2) << "relative error; worst element " << s.worst << " abs error " << s.max_abs;
}

std::string case_name(const ::testing::TestParamInfo<GpuTargetPlan::ParamType>& info) {
  std::string backend = to_string(std::get<1>(info.param));
  std::replace(backend.begin(), backend.end(), '-', '_');  // test names take [A-Za-z0-9_] only
  return std::get<0>(info.param) + "_" + backend + "_t" + std::to_string(std::get<2>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Sm12x, GpuTargetPlan,
                         ::testing::Combine(::testing::Values("rtx5090", "gb10"),
                                            ::testing::Values(Backend::Auto, Backend::Mx),
                                            ::testing::Values(0, 1, 3, 64, 1000, 4096)),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Sm8x, GpuTargetPlan,
                         ::testing::Combine(::testing::Values("a100", "rtx4090"), ::testing::Values(Backend::Auto),
                                            ::testing::Values(0, 1, 3, 64, 1000, 4096)),
                         case_name);
// fp8 on SM89 is the MXFP8 path with the emulated atom (native FP8 mma.sync there).
INSTANTIATE_TEST_SUITE_P(Sm89, GpuTargetPlan,
                         ::testing::Combine(::testing::Values("rtx4090"), ::testing::Values(Backend::MxEmulated),
                                            ::testing::Values(1, 64, 1000)),
                         case_name);

// Code without FP8 mma.sync (sm_80) cannot run a target's MX plan: the runner says so instead of
// launching the atom's trap.
TEST(GpuTargetErrors, AnMxPlanNeedsFp8MmaSyncInTheCodeThisGpuRuns) {
  MXMOE_SKIP_WITHOUT_GPU();
  if (mx_atoms_run_here()) GTEST_SKIP() << "this GPU runs sm_" << code_cc() << " code, which has the MX atoms";
  const MoeConfig cfg = MoeConfig::tiny();
  const MoeLayerData layer = MoeLayerData::random(cfg, fresh_seed());
  RunnerOptions options = gemv_options(4, Backend::Mx);
  options.target = "rtx5090";
  expect_error_naming([&] { MoeRunner(cfg, layer.view(), options); },
                      "backend: 'mx' for target 'rtx5090' runs the emulated MX atom on this GPU");
}

}  // namespace
}  // namespace mxmoe::test
