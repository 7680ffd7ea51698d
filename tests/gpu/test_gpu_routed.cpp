// MoeRunner::forward_routed on the GPU backends: given the ids and weights the route kernel computes
// from the logits, it gives forward()'s bits on every backend and forced plan (GEMV routed inside its
// GEMMs at T = 1..4, its fused and cluster combines, the tensor-core and wgmma tiles at T = 1000 and
// 4096), int32 and int64 ids; against the fp64 reference; in a CUDA graph; one expert taking every
// token; ids of -1 drop their pairs; and ids that are not k distinct experts in range give NaN rows,
// never a fault. Skips itself without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "gpu/gpu_test_support.hpp"
#include "kernels/mma/mma_gemm.hpp"
#include "kernels/sm90/wgmma_gemm.hpp"
#include "moe/workspace.hpp"
#include "reference/routed_reference.hpp"
#include "routing/routing.hpp"

namespace mxmoe::test {
namespace {

struct Routing {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

// The route kernel's own routing of the logits (what forward() computes on the device).
Routing gpu_route(const MoeConfig& cfg, const std::vector<float>& logits, int64_t tokens) {
  if (tokens == 0) return {};
  const WorkspaceLayout layout(cfg, tokens);
  DeviceBuffer ws(std::max<size_t>(layout.total, 1));
  MXMOE_CUDA_CHECK(cudaMemset(ws.get(), 0xFF, ws.bytes()));
  const BoundWorkspace bound = layout.bind(ws.get());
  const DeviceBuffer d_logits = to_device(logits);
  routing::route_and_permute(cfg, d_logits.get<float>(), tokens, bound.routing, nullptr);
  MXMOE_CUDA_CHECK(cudaDeviceSynchronize());
  const size_t pairs = static_cast<size_t>(tokens * cfg.top_k);
  Routing r{std::vector<int32_t>(pairs), std::vector<float>(pairs)};
  if (pairs) {
    MXMOE_CUDA_CHECK(cudaMemcpy(r.ids.data(), bound.routing.expert_ids, pairs * 4, cudaMemcpyDeviceToHost));
    MXMOE_CUDA_CHECK(cudaMemcpy(r.weights.data(), bound.routing.pair_weights, pairs * 4, cudaMemcpyDeviceToHost));
  }
  return r;
}

// forward_routed on host inputs (ids as Id: int32_t or int64_t), output poisoned and workspace filled
// with 0xFF first; in a graph replayed three times when `graph`.
template <class Id>
std::vector<uint16_t> run_routed(const MoeRunner& runner, const std::vector<uint16_t>& hidden,
                                 const std::vector<Id>& ids, const std::vector<float>& weights, int64_t tokens,
                                 bool graph = false) {
  const size_t n = static_cast<size_t>(tokens * runner.config().hidden);
  const DeviceBuffer d_hidden = to_device(hidden), d_ids = to_device(ids), d_weights = to_device(weights);
  DeviceBuffer d_out(std::max<size_t>(n * 2, 2)), ws(std::max<size_t>(runner.workspace_bytes(), 1));
  MXMOE_CUDA_CHECK(cudaMemset(d_out.get(), 0xFF, d_out.bytes()));
  MXMOE_CUDA_CHECK(cudaMemset(ws.get(), 0xFF, ws.bytes()));
  cudaStream_t stream;
  MXMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  MXMOE_CUDA_CHECK(cudaDeviceSynchronize());
  auto forward = [&] {
    runner.forward_routed(d_hidden.get<uint16_t>(), d_ids.get<Id>(), d_weights.get<float>(), tokens,
                          d_out.get<uint16_t>(), ws.get(), ws.bytes(), stream);
  };
  if (graph) {
    cudaGraph_t g;
    cudaGraphExec_t exec;
    MXMOE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    forward();
    MXMOE_CUDA_CHECK(cudaStreamEndCapture(stream, &g));
    MXMOE_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    for (int i = 0; i < 3; ++i) MXMOE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    MXMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
  } else {
    forward();
    MXMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  MXMOE_CUDA_CHECK(cudaStreamDestroy(stream));
  return to_host<uint16_t>(d_out, n);
}

struct Case {
  int experts, top_k, hidden, intermediate;
  int64_t tokens;
  bool one_expert;
};

std::string describe(const Case& c, uint64_t seed) {
  return "seed " + std::to_string(seed) + ", E = " + std::to_string(c.experts) + ", k = " + std::to_string(c.top_k) +
         ", H = " + std::to_string(c.hidden) + ", I = " + std::to_string(c.intermediate) + ", T = " +
         std::to_string(c.tokens) + (c.one_expert ? ", one expert takes every token" : "");
}

// A runner built with `backend` and `plan`; nullopt where this GPU or build refuses the plan (say, the
// wgmma tiles off Hopper).
std::optional<MoeRunner> try_runner(const MoeConfig& cfg, const MoeLayerData& layer, int64_t max_tokens,
                                    Backend backend, const std::string& plan) {
  try {
    return MoeRunner(cfg, layer.view(), gemv_options(max_tokens, backend, parse_plan_override(plan)));
  } catch (const Error& e) {
    std::printf("skipped plan '%s' on %s: %s\n", plan.c_str(), to_string(backend).c_str(), e.what());
    return std::nullopt;
  }
}

// The core check: logits forward, routed forward (int32 and int64 ids) with the route kernel's ids and
// weights, bit for bit; the routed output against the fp64 reference routed the same way (where the
// CPU reference takes seconds at most: the logits forward of larger shapes is held against it in
// test_gpu_moe.cpp).
void check_routed_equals_logits(const MoeRunner& runner, const Case& c, uint64_t seed, bool graph = false) {
  std::mt19937_64 rng(seed);
  const MoeConfig& cfg = runner.config();
  const MoeLayerData layer = MoeLayerData::random(cfg, seed);
  const auto hidden = random_hidden(c.tokens, cfg.hidden, rng);
  auto logits = random_logits(c.tokens, cfg.num_experts, rng);
  if (c.one_expert) route_every_token_to_one_expert(logits, c.tokens, cfg.num_experts);
  const Routing r = gpu_route(cfg, logits, c.tokens);
  const auto want = run_on_gpu(runner, hidden, logits, c.tokens);
  const auto got = run_routed(runner, hidden, r.ids, r.weights, c.tokens);
  EXPECT_EQ(got, want) << "routed (int32 ids) differs from the logits forward";
  const std::vector<int64_t> ids64(r.ids.begin(), r.ids.end());
  EXPECT_EQ(run_routed(runner, hidden, ids64, r.weights, c.tokens), want) << "int64 ids differ";
  if (graph) EXPECT_EQ(run_routed(runner, hidden, r.ids, r.weights, c.tokens, true), want) << "graph replay differs";
  if (c.tokens == 0 || c.tokens * cfg.hidden * cfg.intermediate > int64_t{1000} * 256 * 192) return;
  std::vector<double> ref(hidden.size());
  ReferenceOptions mx;
  mx.mxfp8_gemm1_input = mx.mxfp8_gemm2_input = backend_uses_mxfp8(runner.backend());
  reference_moe_routed_f64(cfg, layer.view(), hidden, r.ids, r.weights, c.tokens, ref, mx);
  const ErrorStats e = compare(got, ref);
  EXPECT_EQ(e.nan_count, 0) << "unwritten or non-finite outputs";
  EXPECT_LE(e.rel, 1e-2) << "relative error to the fp64 reference; worst element " << e.worst;
}

class GpuRouted : public ::testing::TestWithParam<Backend> {};

// Every backend at its own plans: decode sizes (GEMV routed locally up to T = 4), T = 0, odd shapes,
// one expert taking every token (the others none), T = 1000; a graph replay at a few sizes.
TEST_P(GpuRouted, EqualsLogitsForwardBitForBit) {
  MXMOE_SKIP_WITHOUT_GPU();
  const Backend backend = GetParam();
  if (backend_uses_mxfp8(backend)) MXMOE_SKIP_WITHOUT_MX_ATOMS();
  const Case cases[] = {{32, 4, 2880, 2880, 1, false}, {128, 4, 2880, 2880, 4, false}, {8, 2, 64, 64, 0, false},
                        {8, 2, 64, 64, 3, false},      {5, 3, 96, 160, 2, false},      {256, 8, 256, 192, 4, false},
                        {32, 4, 256, 192, 5, false},   {8, 2, 256, 192, 3, true},      {32, 4, 256, 192, 1000, true},
                        {32, 4, 256, 192, 1000, false},  {32, 4, 1088, 1088, 1000, false}};
  for (const Case& c : cases) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(describe(c, seed));
    const MoeConfig cfg = make_config(c.experts, c.top_k, c.hidden, c.intermediate);
    const MoeLayerData layer = MoeLayerData::random(cfg, seed);
    const MoeRunner runner(cfg, layer.view(), gemv_options(std::max<int64_t>(c.tokens, 1), backend));
    SCOPED_TRACE("plan: " + runner.describe_plan(c.tokens));
    check_routed_equals_logits(runner, c, seed, c.tokens > 0 && c.tokens <= 4);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, GpuRouted,
                         ::testing::Values(Backend::Auto, Backend::Gemv, Backend::Mma, Backend::MxEmulated),
                         [](const auto& info) {
                           std::string name = to_string(info.param);
                           for (char& ch : name)
                             if (ch == '-') ch = '_';
                           return name;
                         });

// Forced GEMV plans at T = 1..4: routed inside both GEMMs or by the route kernel, the combine fused
// (through a count or a cluster of the slots) or a kernel, split-K pinned or the cost model's.
TEST(GpuRoutedPlans, GemvLocalRouteAndCombinesGiveTheLogitsBits) {
  MXMOE_SKIP_WITHOUT_GPU();
  const std::string plans[] = {"local_route=4,fused_combine=8", "local_route=0,fused_combine=8",
                               "local_route=4,fused_combine=0", "local_route=0,fused_combine=0,counted=1",
                               "cluster_combine=1",             "cluster_combine=0,ksplit=4"};
  for (const Case& shape : {Case{32, 4, 2880, 2880, 1, false}, Case{256, 8, 256, 192, 1, false},
                            Case{8, 2, 256, 192, 1, true}}) {
    for (const std::string& plan : plans) {
      const MoeConfig cfg = make_config(shape.experts, shape.top_k, shape.hidden, shape.intermediate);
      const uint64_t seed = fresh_seed();
      const MoeLayerData layer = MoeLayerData::random(cfg, seed);
      const std::optional<MoeRunner> runner = try_runner(cfg, layer, 4, Backend::Gemv, plan);
      if (!runner) continue;
      for (int64_t t = 1; t <= 4; ++t) {
        Case c = shape;
        c.tokens = t;
        SCOPED_TRACE(describe(c, seed) + ", plan " + plan + ": " + runner->describe_plan(t));
        if (plan.rfind("local_route=4", 0) == 0)
          EXPECT_NE(runner->describe_plan(t).find("routed in both gemms"), std::string::npos);
        check_routed_equals_logits(*runner, c, seed, true);
      }
    }
  }
}

// The tensor-core tiles (plain, swap-AB, and on Hopper wgmma) at T = 1000 and 4096.
TEST(GpuRoutedPlans, TensorCoreTilesGiveTheLogitsBits) {
  MXMOE_SKIP_WITHOUT_GPU();
  const std::string plans[] = {"mma=64", "mma=swap32", "mma=wgmma64", "mma=wgmma128"};
  const MoeConfig cfg = make_config(32, 4, 1088, 1088);
  for (const int64_t tokens : {int64_t{1000}, int64_t{4096}}) {
    for (const std::string& plan : plans) {
      const uint64_t seed = fresh_seed();
      const MoeLayerData layer = MoeLayerData::random(cfg, seed);
      const std::optional<MoeRunner> runner = try_runner(cfg, layer, tokens, Backend::Mma, plan);
      if (!runner) continue;
      const Case c{32, 4, 1088, 1088, tokens, false};
      const std::string text = runner->describe_plan(tokens);
      SCOPED_TRACE(describe(c, seed) + ", plan " + plan + ": " + text);
      const char* form = plan.find("wgmma") != std::string::npos  ? "wgmma"
                         : plan.find("swap") != std::string::npos ? "swap-AB"
                                                                  : "mma bf16";
      EXPECT_NE(text.find(form), std::string::npos) << "the forced tile does not run";
      check_routed_equals_logits(*runner, c, seed, tokens == 1000);
    }
  }
}

// Ids that are not k distinct experts in [0, E) (out of range, negative, repeated in a token, int64
// beyond int32) give that token a NaN row and leave every other token's row as it was; nothing is read
// or written out of bounds (compute-sanitizer on this test checks that). Every plan kind: GEMV routed
// locally (T = 3) and by the kernel (T = 9), the tensor-core family, the MX path.
TEST(GpuRoutedPlans, BadIdsGiveNanRowsOnly) {
  MXMOE_SKIP_WITHOUT_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const MoeConfig cfg = make_config(16, 4, 256, 192);
  const MoeLayerData layer = MoeLayerData::random(cfg, seed);
  for (const Backend backend : {Backend::Gemv, Backend::Mma, Backend::MxEmulated}) {
    if (backend_uses_mxfp8(backend) && !mx_atoms_run_here()) continue;  // no FP8 mma.sync in this code
    for (const int64_t tokens : {int64_t{3}, int64_t{9}}) {
      SCOPED_TRACE(to_string(backend) + ", T = " + std::to_string(tokens));
      const MoeRunner runner(cfg, layer.view(), gemv_options(tokens, backend));
      const auto hidden = random_hidden(tokens, cfg.hidden, rng);
      const Routing good = gpu_route(cfg, random_logits(tokens, cfg.num_experts, rng), tokens);
      std::vector<int64_t> ids(good.ids.begin(), good.ids.end());
      const auto want = run_routed(runner, hidden, ids, good.weights, tokens);
      ids[0 * 4 + 2] = cfg.num_experts;       // token 0: out of range
      ids[2 * 4 + 1] = ids[2 * 4 + 3];        // token 2: an expert twice
      if (tokens > 3) {
        ids[4 * 4 + 0] = -2;                  // token 4: negative (not -1, which drops the pair)
        ids[7 * 4 + 3] = int64_t{1} << 33;    // token 7: beyond int32 (0 once narrowed)
      }
      const auto got = run_routed(runner, hidden, ids, good.weights, tokens);
      const std::vector<int64_t> bad_tokens =
          tokens > 3 ? std::vector<int64_t>{0, 2, 4, 7} : std::vector<int64_t>{0, 2};
      for (int64_t t = 0; t < tokens; ++t) {
        const bool bad = std::find(bad_tokens.begin(), bad_tokens.end(), t) != bad_tokens.end();
        for (int64_t j = 0; j < cfg.hidden; ++j) {
          const size_t i = static_cast<size_t>(t * cfg.hidden + j);
          if (bad) ASSERT_TRUE(std::isnan(bf16_to_float(got[i]))) << "token " << t << ", element " << j;
          else ASSERT_EQ(got[i], want[i]) << "token " << t << ", element " << j;
        }
      }
    }
  }
}

// Ids of -1 drop their pairs (vLLM's expert-parallel convention): against the fp64 reference routed
// the same way, on every plan kind (GEMV routed locally at T = 3 and by the route kernel at T = 9, its
// fused combine, the plain, swap-AB and wgmma tiles at T = 64 and 1000, the MX path); a token with every
// pair dropped is an exact zero row, and a layer whose every pair is dropped writes zeros everywhere.
TEST(GpuRoutedPlans, DroppedPairsAddNothing) {
  MXMOE_SKIP_WITHOUT_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const MoeConfig cfg = make_config(16, 4, 256, 192);
  const MoeLayerData layer = MoeLayerData::random(cfg, seed);
  struct Run {
    Backend backend;
    const char* plan;
    int64_t tokens;
  };
  for (const Run& run : {Run{Backend::Gemv, "", 3}, Run{Backend::Gemv, "local_route=0,fused_combine=8", 3},
                         Run{Backend::Gemv, "", 9}, Run{Backend::Mma, "mma=64", 64}, Run{Backend::Mma, "mma=swap32", 64},
                         Run{Backend::Mma, "mma=wgmma64", 1000}, Run{Backend::Mma, "mma=64", 1000},
                         Run{Backend::MxEmulated, "", 64}}) {
    const std::optional<MoeRunner> runner = try_runner(cfg, layer, run.tokens, run.backend, run.plan);
    if (!runner) continue;
    const int64_t tokens = run.tokens;
    SCOPED_TRACE(to_string(run.backend) + " '" + run.plan + "', T = " + std::to_string(tokens) + ": " +
                 runner->describe_plan(tokens));
    const auto hidden = random_hidden(tokens, cfg.hidden, rng);
    Routing r = gpu_route(cfg, random_logits(tokens, cfg.num_experts, rng), tokens);
    std::bernoulli_distribution drop(0.4);
    for (int32_t& id : r.ids)
      if (drop(rng)) id = kDroppedPairId;
    for (int s = 0; s < cfg.top_k; ++s) r.ids[static_cast<size_t>(cfg.top_k + s)] = kDroppedPairId;  // token 1
    const auto got = run_routed(*runner, hidden, r.ids, r.weights, tokens);
    for (int64_t j = 0; j < cfg.hidden; ++j) ASSERT_EQ(got[static_cast<size_t>(cfg.hidden + j)], 0) << "token 1, " << j;
    std::vector<double> ref(hidden.size());
    ReferenceOptions mx;
    mx.mxfp8_gemm1_input = mx.mxfp8_gemm2_input = backend_uses_mxfp8(runner->backend());
    reference_moe_routed_f64(cfg, layer.view(), hidden, r.ids, r.weights, tokens, ref, mx);
    const ErrorStats e = compare(got, ref);
    EXPECT_EQ(e.nan_count, 0) << "unwritten or non-finite outputs";
    EXPECT_LE(e.rel, 1e-2) << "relative error to the fp64 reference; worst element " << e.worst;
    std::fill(r.ids.begin(), r.ids.end(), kDroppedPairId);
    const auto none = run_routed(*runner, hidden, r.ids, r.weights, tokens);
    EXPECT_TRUE(std::all_of(none.begin(), none.end(), [](uint16_t v) { return v == 0; })) << "every pair dropped";
  }
}

// Host-side checks of forward_routed on a GPU runner: host pointers and misaligned ids are Errors
// naming the argument (the device ids themselves are never read on the host).
TEST(GpuRoutedPlans, HostSideChecksNameTheArgument) {
  MXMOE_SKIP_WITHOUT_GPU();
  const MoeConfig cfg = MoeConfig::tiny();
  const MoeLayerData layer = MoeLayerData::random(cfg, 11);
  const MoeRunner runner(cfg, layer.view(), gemv_options(4, Backend::Gemv));
  DeviceBuffer hidden(4 * 64 * 2), out(4 * 64 * 2), ids(4 * 2 * 8 + 8), weights(4 * 2 * 4);
  DeviceBuffer ws(runner.workspace_bytes());
  const std::vector<int32_t> host_ids(8, 0);
  const std::vector<float> host_weights(8, 0.5f);
  auto run = [&](const auto* i, const float* w) {
    runner.forward_routed(hidden.get<uint16_t>(), i, w, 2, out.get<uint16_t>(), ws.get(), ws.bytes());
  };
  expect_error_naming([&] { run(host_ids.data(), weights.get<float>()); }, "topk_ids: expected a CUDA device pointer");
  expect_error_naming([&] { run(ids.get<int32_t>(), host_weights.data()); },
                      "topk_weights: expected a CUDA device pointer");
  const auto* misaligned = reinterpret_cast<const int64_t*>(ids.get<uint8_t>() + 4);
  expect_error_naming([&] { run(misaligned, weights.get<float>()); }, "topk_ids: must be 8-byte aligned");
  // Valid pointers: runs (whatever the ids hold: uninitialised ones give NaN rows, never a fault).
  run(ids.get<int32_t>(), weights.get<float>());
  MXMOE_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace mxmoe::test
