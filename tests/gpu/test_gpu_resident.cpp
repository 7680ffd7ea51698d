// The GEMV decode stream (kernels/gemv/resident.hpp) on the GPU. Its sums are the two-kernel GEMV
// plan's, so with the same split-K it gives that plan's bits: held here eager, twice, in a graph replayed
// three times (its counters are cleared every forward; the workspace is 0xFF first), against the fp64
// reference, and with the engine's ids, dropped pairs included. Shapes: gpt-oss's at T = 1, a
// tensor-parallel rank's at T = 1 (I = 1440) and T = 2 (I = 736), odd K (96, 160: splits with no chunks), k = 3, 8 slots, wide
// scales, one expert taking every token. Plans that do not fit this device are skipped and named.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "gpu/gpu_test_support.hpp"
#include "gpu/layer_inputs.hpp"

namespace mxmoe::test {
namespace {

MoeRunner make_runner(const LayerInputs& in, int64_t tokens, int ksplit, bool resident) {
  PlanOverride plan;
  plan.gemv_ksplit = ksplit;
  plan.resident = resident;
  return MoeRunner(in.cfg, in.layer.view(), gemv_options(tokens, Backend::Gemv, plan));
}

bool is_resident(const MoeRunner& runner, int64_t tokens) {
  return runner.describe_plan(tokens).find("resident in shared memory") != std::string::npos;
}

// forward_routed with int32 ids (output poisoned, workspace 0xFF first).
std::vector<uint16_t> run_ids(const MoeRunner& runner, const std::vector<uint16_t>& hidden,
                              const std::vector<int32_t>& ids, const std::vector<float>& weights, int64_t tokens) {
  const size_t n = static_cast<size_t>(tokens * runner.config().hidden);
  const DeviceBuffer d_hidden = to_device(hidden), d_ids = to_device(ids), d_weights = to_device(weights);
  DeviceBuffer d_out(n * 2), ws(runner.workspace_bytes());
  MXMOE_CUDA_CHECK(cudaMemset(d_out.get(), 0xFF, d_out.bytes()));
  MXMOE_CUDA_CHECK(cudaMemset(ws.get(), 0xFF, ws.bytes()));
  runner.forward_routed(d_hidden.get<uint16_t>(), d_ids.get<int32_t>(), d_weights.get<float>(), tokens,
                        d_out.get<uint16_t>(), ws.get(), ws.bytes(), nullptr);
  MXMOE_CUDA_CHECK(cudaDeviceSynchronize());
  return to_host<uint16_t>(d_out, n);
}

TEST(GpuLayerResident, GivesTheTwoKernelPlansBits) {
  MXMOE_SKIP_WITHOUT_GPU();
  const uint64_t seed = fresh_seed();
  const InputCase cases[] = {{32, 4, 2880, 2880, 1, false, false}, {32, 4, 2880, 1440, 1, false, false},
                             {32, 4, 2880, 736, 2, false, false},
                             {5, 2, 96, 160, 2, false, false},     {3, 3, 96, 160, 1, false, false},
                             {16, 2, 384, 256, 2, false, true},    {256, 8, 256, 192, 1, false, false},
                             {8, 2, 256, 192, 2, true, false}};
  int ran = 0;
  for (const InputCase& c : cases) {
    SCOPED_TRACE(describe(c, seed));
    const LayerInputs in = make_inputs(c, seed);
    for (const int ksplit : {4, 2, 1}) {
      SCOPED_TRACE("ksplit " + std::to_string(ksplit));
      const MoeRunner resident = make_runner(in, c.tokens, ksplit, true);
      const MoeRunner two = make_runner(in, c.tokens, ksplit, false);
      ASSERT_FALSE(is_resident(two, c.tokens)) << two.describe_plan(c.tokens);
      if (!is_resident(resident, c.tokens)) {
        std::printf("not resident on this device: %s, ksplit %d: %s\n", describe(c, seed).c_str(), ksplit,
                    resident.describe_plan(c.tokens).c_str());
        continue;
      }
      ++ran;
      const auto want = run_checked(two, in, c.tokens);
      const auto got = run_checked(resident, in, c.tokens);
      EXPECT_EQ(got, want) << "the resident kernel's bits differ from the two-kernel plan's";
      EXPECT_EQ(run_on_gpu(resident, in.hidden, in.logits, c.tokens), got) << "two eager runs differ";
      EXPECT_EQ(run_graph_replay(resident, in.hidden, in.logits, c.tokens), got) << "graph replay differs";
    }
  }
  if (ran == 0) GTEST_SKIP() << "no case fits this device's shared memory";
}

// The engine's ids with dropped pairs (-1): the resident plan gives the two-kernel plan's bits, and a token
// whose pairs are all dropped gets zero rows (every pair dropped: no expert slot at all).
TEST(GpuLayerResident, RoutedIdsWithDroppedPairs) {
  MXMOE_SKIP_WITHOUT_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const InputCase c{32, 4, 2880, 2880, 2, false, false};
  const LayerInputs in = make_inputs(c, seed);
  const MoeRunner resident = make_runner(in, 1, 4, true), two = make_runner(in, 1, 4, false);
  if (!is_resident(resident, 1)) GTEST_SKIP() << "not resident on this device: " << resident.describe_plan(1);
  const std::vector<uint16_t> token(in.hidden.begin(), in.hidden.begin() + in.cfg.hidden);
  const std::vector<float> weights = {0.4f, 0.3f, 0.2f, 0.1f};
  for (const std::vector<int32_t>& ids : {std::vector<int32_t>{3, 17, 9, 30}, std::vector<int32_t>{3, -1, 9, -1},
                                          std::vector<int32_t>{-1, -1, -1, 5}}) {
    SCOPED_TRACE("ids " + std::to_string(ids[0]) + " " + std::to_string(ids[1]) + " " + std::to_string(ids[2]) + " " +
                 std::to_string(ids[3]));
    const auto got = run_ids(resident, token, ids, weights, 1);
    EXPECT_EQ(got, run_ids(two, token, ids, weights, 1));
    EXPECT_NE(got, std::vector<uint16_t>(got.size(), 0)) << "a live pair's row is zero";
  }
  const auto none = run_ids(resident, token, {-1, -1, -1, -1}, weights, 1);
  EXPECT_EQ(none, std::vector<uint16_t>(none.size(), 0)) << "every pair dropped: zero rows";
}

}  // namespace
}  // namespace mxmoe::test
