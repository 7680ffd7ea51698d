// The whole MoE layer on the GPU against the fp64 CPU reference (ARCHITECTURE.md numerics), plus
// determinism and CUDA-graph replay. Skips itself without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <cstring>
#include <tuple>
#include <utility>

#include "gpu/gpu_test_support.hpp"
#include "kernels/gemv/gemv.hpp"
#include "kernels/mma/mma_gemm.hpp"
#include "kernels/sm90/wgmma_gemm.hpp"
#include "plan/device_caps.hpp"

namespace mxmoe::test {
namespace {

struct LayerCase {
  const char* name;
  int experts, top_k, hidden, intermediate;
  int64_t tokens;
  bool one_expert;  // route every token to the same expert
  bool with_bias;
  bool wide_scales = false;  // some scale bytes above 128: the GEMV kernel's general multiplier path
};

MoeConfig make_config(const LayerCase& c) {
  MoeConfig cfg;
  cfg.name = c.name;
  cfg.num_experts = c.experts;
  cfg.top_k = c.top_k;
  cfg.hidden = c.hidden;
  cfg.intermediate = c.intermediate;
  return cfg;
}

// Each shape on each GPU family: GEMV, the tensor-core family (Mma) and the planner (Auto).
class GpuLayer : public ::testing::TestWithParam<std::tuple<LayerCase, Backend>> {};

TEST_P(GpuLayer, MatchesReference) {
  MXMOE_SKIP_WITHOUT_GPU();
  const LayerCase c = std::get<0>(GetParam());
  const Backend backend = std::get<1>(GetParam());
  if (backend_uses_mxfp8(backend)) MXMOE_SKIP_WITHOUT_MX_ATOMS();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const MoeConfig cfg = make_config(c);
  MoeLayerData layer = MoeLayerData::random(cfg, seed, c.with_bias);
  if (c.wide_scales) lift_some_scales(layer);
  const auto hidden = random_hidden(c.tokens, cfg.hidden, rng);
  auto logits = random_logits(c.tokens, cfg.num_experts, rng);
  if (c.one_expert) route_every_token_to_one_expert(logits, c.tokens, cfg.num_experts);

  const MoeRunner runner(cfg, layer.view(), gemv_options(std::max<int64_t>(c.tokens, 1), backend));
  SCOPED_TRACE("plan: " + runner.describe_plan(c.tokens));
  const auto out = run_on_gpu(runner, hidden, logits, c.tokens);

  std::vector<double> ref(static_cast<size_t>(c.tokens * cfg.hidden));
  reference_moe_f64(cfg, layer.view(), hidden, logits, c.tokens, ref);
  const ErrorStats s = compare(out, ref);
  EXPECT_EQ(s.nan_count, 0) << "unwritten or non-finite outputs";
  if (backend_uses_mxfp8(backend)) {
    // The gate: <= 1e-2 against a reference that quantises the activations the same way
    // (ARCHITECTURE.md numerics). Against the unquantised reference ARCHITECTURE.md says 5e-2, but the
    // exact MXFP8 reference is itself 3-5.5% off it on these random layers (e4m3 keeps 3 mantissa
    // bits) and 13-17% with the lifted scales (measured on the CPU), so that check uses 8e-2 and
    // leaves out the wide-scale shapes.
    if (!c.wide_scales) EXPECT_LE(s.rel, 8e-2) << "relative error to the bf16 reference; worst element " << s.worst;
    ReferenceOptions mx;
    mx.mxfp8_gemm1_input = mx.mxfp8_gemm2_input = true;
    std::vector<double> ref_mx(ref.size());
    reference_moe_f64(cfg, layer.view(), hidden, logits, c.tokens, ref_mx, mx);
    const ErrorStats m = compare(out, ref_mx);
    EXPECT_LE(m.rel, 1e-2) << "relative error to the MXFP8 reference; worst element " << m.worst << " abs error "
                           << m.max_abs;
  } else {
    EXPECT_LE(s.rel, 1e-2) << "relative error; worst element " << s.worst << " abs error " << s.max_abs;
  }
  if (c.tokens > 0) EXPECT_GT(std::abs(bf16_to_float(out[0])) + std::abs(bf16_to_float(out.back())), 0.f);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GpuLayer,
    ::testing::Combine(::testing::Values(LayerCase{"t0", 32, 4, 2880, 2880, 0, false, true},
                      LayerCase{"t1_e32_2880", 32, 4, 2880, 2880, 1, false, true},
                      LayerCase{"t3_e128_2880", 128, 4, 2880, 2880, 3, false, true},
                      LayerCase{"t1_e128_2880", 128, 4, 2880, 2880, 1, false, true},
                      LayerCase{"t2_e32_2880", 32, 4, 2880, 2880, 2, false, true},
                      LayerCase{"t2_one_expert", 8, 2, 256, 192, 2, true, true},
                      LayerCase{"t2_e256_k8", 256, 8, 256, 192, 2, false, true},
                      LayerCase{"t1_odd_k", 5, 3, 96, 160, 1, false, true},
                      LayerCase{"t16_e32_2880_nobias", 32, 4, 2880, 2880, 16, false, false},
                      LayerCase{"t3_small", 8, 2, 64, 64, 3, false, true},
                      LayerCase{"t1000_small", 32, 4, 256, 192, 1000, false, true},
                      LayerCase{"t1000_one_expert", 32, 4, 256, 192, 1000, true, true},
                      LayerCase{"t37_odd_k", 5, 3, 96, 160, 37, false, true},
                      LayerCase{"t64_e128_k8", 128, 8, 512, 288, 64, false, true},
                      LayerCase{"t5_wide_scales", 16, 4, 384, 256, 5, false, true, true},
                      LayerCase{"t300_wide_scales", 16, 4, 384, 256, 300, false, true, true},
                      LayerCase{"t200_e32_1088", 32, 4, 1088, 1088, 200, false, true}),
                       ::testing::Values(Backend::Gemv, Backend::Mma, Backend::Auto, Backend::MxEmulated)),
    [](const auto& info) {
      std::string backend = to_string(std::get<1>(info.param));
      std::replace(backend.begin(), backend.end(), '-', '_');  // test names take [A-Za-z0-9_] only
      return std::string(std::get<0>(info.param).name) + "_" + backend;
    });

// Two eager runs and a graph replay give the same bits.
TEST(GpuLayerDeterminism, EagerTwiceAndGraphReplayAgree) {
  MXMOE_SKIP_WITHOUT_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  MoeConfig cfg = MoeConfig::gpt_oss_20b();
  const MoeLayerData layer = MoeLayerData::random(cfg, seed);
  const int64_t tokens = 67;
  const auto hidden = random_hidden(tokens, cfg.hidden, rng);
  const auto logits = random_logits(tokens, cfg.num_experts, rng);
  for (const Backend backend : {Backend::Gemv, Backend::Mma, Backend::MxEmulated}) {
    SCOPED_TRACE(to_string(backend));
    if (backend_uses_mxfp8(backend) && !mx_atoms_run_here()) continue;  // no FP8 mma.sync in this code
    const MoeRunner runner(cfg, layer.view(), gemv_options(128, backend));
    const auto first = run_on_gpu(runner, hidden, logits, tokens);
    const auto second = run_on_gpu(runner, hidden, logits, tokens);
    ASSERT_EQ(first, second) << "two eager runs differ";
    EXPECT_EQ(first, run_graph_replay(runner, hidden, logits, tokens)) << "graph replay differs from eager";
  }
}

// One test shape: a fresh random layer, its inputs (the hidden rows, then the logits, from one rng of
// the seed), optionally every token routed to one expert and some scale bytes lifted.
struct InputCase {
  int experts, top_k, hidden, intermediate;
  int64_t tokens;
  bool one_expert, wide_scales;
};

// A case's layer and inputs, and their fp64 reference output.
struct LayerInputs {
  MoeConfig cfg;
  MoeLayerData layer;
  std::vector<uint16_t> hidden;
  std::vector<float> logits;
  std::vector<double> reference() const {
    std::vector<double> ref(hidden.size());
    reference_moe_f64(cfg, layer.view(), hidden, logits, static_cast<int64_t>(logits.size()) / cfg.num_experts, ref);
    return ref;
  }
};
LayerInputs make_inputs(const InputCase& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  LayerInputs in{mxmoe::test::make_config(c.experts, c.top_k, c.hidden, c.intermediate), {}, {}, {}};
  in.layer = MoeLayerData::random(in.cfg, seed);
  if (c.wide_scales) lift_some_scales(in.layer);
  in.hidden = random_hidden(c.tokens, in.cfg.hidden, rng);
  in.logits = random_logits(c.tokens, in.cfg.num_experts, rng);
  if (c.one_expert) route_every_token_to_one_expert(in.logits, c.tokens, in.cfg.num_experts);
  return in;
}
// Runs `runner` on the case's inputs and checks the output against the fp64 reference: every element
// written and finite, relative error at most 1e-2. Returns the output for further checks.
std::vector<uint16_t> run_checked(const MoeRunner& runner, const LayerInputs& in, int64_t tokens) {
  const auto out = run_on_gpu(runner, in.hidden, in.logits, tokens);
  const ErrorStats e = compare(out, in.reference());
  EXPECT_EQ(e.nan_count, 0) << "unwritten or non-finite outputs";
  EXPECT_LE(e.rel, 1e-2) << "worst element " << e.worst;
  return out;
}
std::string describe(const InputCase& c, uint64_t seed) {
  return "seed " + std::to_string(seed) + ", T = " + std::to_string(c.tokens) + ", H = " + std::to_string(c.hidden) +
         ", I = " + std::to_string(c.intermediate);
}

// Small T takes other launch sequences: up to the plan's local_route tokens both GEMMs route the tokens
// themselves (no route kernel), and up to its fused_combine tokens GEMM2's last blocks combine (no
// combine kernel). A token's output must not depend on which: with the split-K pinned, T = 1, 2, 3, 4,
// 5, 8 give the same bits as the first rows of T = 9 (route kernel, combine kernel) on the same tokens,
// with the routing local up to T = 4 and never, the combine fused up to T = 8 and never;
// and each small T gives the same bits eager twice and in a graph replayed three times (the combine
// counters are cleared every forward).
TEST(GpuLayerPaths, SmallBatchSequencesGiveTheGeneralPathsBits) {
  MXMOE_SKIP_WITHOUT_GPU();
  const int64_t general = 9;
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // k = 8 at T = 4 fills the 32 pairs the local routing ranks one per lane.
  for (const InputCase& c :
       {InputCase{32, 4, 512, 384, general, false, false}, InputCase{256, 8, 256, 192, general, false, false}}) {
    SCOPED_TRACE(describe(c, seed));
    const LayerInputs in = make_inputs(c, seed);
    const MoeConfig& cfg = in.cfg;
    for (const int ksplit : {1, 4})
    for (const int fused : {0, 8})
    for (const int local : {0, 4}) {
      PlanOverride plan;
      plan.gemv_ksplit = ksplit;
      plan.fused_combine_tokens = fused;
      plan.local_route_tokens = local;
      SCOPED_TRACE("plan " + to_string(plan));
      const MoeRunner runner(cfg, in.layer.view(), gemv_options(general, Backend::Gemv, plan));
      EXPECT_EQ(runner.describe_plan(8).find("combine in gemm2") != std::string::npos, fused == 8)
          << runner.describe_plan(8);
      EXPECT_EQ(runner.describe_plan(4).find("routed in both gemms") != std::string::npos, local == 4)
          << runner.describe_plan(4);
      const auto full = run_on_gpu(runner, in.hidden, in.logits, general);
      for (const int64_t t : {1, 2, 3, 4, 5, 8}) {
        SCOPED_TRACE("T = " + std::to_string(t));
        const std::vector<uint16_t> h(in.hidden.begin(), in.hidden.begin() + t * cfg.hidden);
        const std::vector<float> l(in.logits.begin(), in.logits.begin() + t * cfg.num_experts);
        const auto out = run_on_gpu(runner, h, l, t);
        ASSERT_EQ(out, std::vector<uint16_t>(full.begin(), full.begin() + t * cfg.hidden))
            << "differs from the first rows of T = " << general;
        EXPECT_EQ(out, run_on_gpu(runner, h, l, t)) << "two eager runs differ";
        EXPECT_EQ(out, run_graph_replay(runner, h, l, t)) << "graph replay differs from eager";
      }
    }
  }
}

// GEMM2's combine through a thread-block cluster of the expert slots (T * k <= 4, routed locally:
// kernels/gemv/cluster_combine.cuh) against the count in L2 (plan cluster_combine=0): the same
// rows summed in the same order, so the same bits. Clusters of 4 (gpt-oss's K at T = 1; k = 2 at T = 2,
// where a slot may hold both tokens), of 3, a cluster with an idle slot (one expert taking every token),
// wide scales; the cost model's split-K and forced ones; a graph replayed.
TEST(GpuLayerClusterCombine, GivesTheCountedCombinesBits) {
  MXMOE_SKIP_WITHOUT_GPU();
  if (!plan::probe_caps(0).clusters) GTEST_SKIP() << "no thread-block clusters in the code this GPU runs";
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const InputCase cases[] = {{32, 4, 2880, 2880, 1, false, false}, {32, 2, 2880, 2880, 2, true, false},
                             {5, 2, 96, 160, 2, false, false},     {3, 3, 96, 160, 1, false, false},
                             {16, 2, 384, 256, 2, false, true},    {256, 4, 256, 192, 1, false, false}};
  for (const InputCase& c : cases) {
    SCOPED_TRACE(describe(c, seed));
    const LayerInputs in = make_inputs(c, seed);
    const std::optional<int> ksplits[] = {std::nullopt, 1, 8};  // the cost model's, then forced ones
    for (const std::optional<int>& ksplit : ksplits) {
      SCOPED_TRACE("ksplit " + (ksplit ? std::to_string(*ksplit) : std::string("of the cost model")));
      const auto make = [&](bool cluster) {
        PlanOverride plan;
        plan.cluster_combine = cluster;
        plan.gemv_ksplit = ksplit;
        return MoeRunner(in.cfg, in.layer.view(), gemv_options(c.tokens, Backend::Gemv, plan));
      };
      const MoeRunner clustered = make(true), counted = make(false);
      ASSERT_NE(clustered.describe_plan(c.tokens).find("a cluster of the slots"), std::string::npos)
          << clustered.describe_plan(c.tokens);
      ASSERT_EQ(counted.describe_plan(c.tokens).find("cluster"), std::string::npos) << counted.describe_plan(c.tokens);
      const auto want = run_checked(counted, in, c.tokens);
      EXPECT_EQ(run_checked(clustered, in, c.tokens), want);
      EXPECT_EQ(run_graph_replay(clustered, in.hidden, in.logits, c.tokens), want) << "graph replay";
    }
  }
}

// RunnerOptions::tune_file (MXMOE_TUNE_FILE's value where it is empty): a table for this device and
// shape steers Auto (here: the 32-row tensor-core tile at every T, even T = 1); a table for another
// device is ignored; the result still matches the reference.
TEST(GpuLayerTune, AutoFollowsATableForThisDeviceOnly) {
  MXMOE_SKIP_WITHOUT_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const LayerInputs in = make_inputs({32, 4, 512, 384, 3, false, false}, seed);
  const MoeConfig& cfg = in.cfg;
  const MoeLayerData& layer = in.layer;
  int device = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, device), cudaSuccess);
  const std::string path = ::testing::TempDir() + "mxmoe_gpu_tune.json";
  auto write = [&](const std::string& name) {
    std::ofstream(path) << R"({"device": ")" << name << R"(", "compute_capability": ")" << code_cc() / 10 << "."
                        << code_cc() % 10 << R"(", "shape": {"experts": 32, "top_k": 4, "hidden": 512, "intermediate": 384},
                        "plans": [{"family": "mma", "m_tiles": 2}]})";
  };
  auto runner_with_table_for = [&](const std::string& device_name) {
    write(device_name);
    RunnerOptions options = gemv_options(8, Backend::Auto);
    options.tune_file = path;
    return MoeRunner(cfg, layer.view(), options);
  };
  const MoeRunner tuned = runner_with_table_for(prop.name);
  const MoeRunner untuned = runner_with_table_for("some other GPU");
  std::remove(path.c_str());
  EXPECT_NE(tuned.describe_plan(1).find("mma bf16 32x256x128 tiles, both gemms (tune table)"), std::string::npos)
      << tuned.describe_plan(1);
  EXPECT_NE(untuned.describe_plan(1).find("gemv"), std::string::npos) << untuned.describe_plan(1);
  run_checked(tuned, in, 3);
}

// Forwards of different T and routings back to back on one stream and one workspace, with no
// synchronisation between them: programmatic dependent launch and the per-T workspace layout must not
// let one forward see another's routing or intermediate.
TEST(GpuLayerSequence, BackToBackForwardsOnOneWorkspace) {
  MXMOE_SKIP_WITHOUT_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const MoeConfig cfg = mxmoe::test::make_config(32, 4, 512, 384);
  const MoeLayerData layer = MoeLayerData::random(cfg, seed);
  // Auto switches plans inside the sequence: T = 9 (about 1 row per expert) takes the 8-row GEMV batch,
  // T = 37 and 64 (4.6 and 8 rows per expert) the tensor-core family's 16-row swap-AB tile, T = 192 (24
  // rows per expert) its 32-row swap-AB tile (on Hopper the 64-row wgmma tile).
  const MoeRunner runner(cfg, layer.view(), gemv_options(192, Backend::Auto));
  ASSERT_NE(runner.describe_plan(9).find("gemv"), std::string::npos) << runner.describe_plan(9);
  ASSERT_NE(runner.describe_plan(64).find("mma"), std::string::npos) << runner.describe_plan(64);
  ASSERT_NE(runner.describe_plan(192).find("mma"), std::string::npos) << runner.describe_plan(192);
  if (mma::swap_supported(2)) {  // the swap-AB tile, or on Hopper the wgmma tile
    const std::string plan = runner.describe_plan(192);
    ASSERT_TRUE(plan.find("swap-AB") != std::string::npos || plan.find("wgmma") != std::string::npos) << plan;
    ASSERT_NE(plan, runner.describe_plan(64));
  }
  DeviceBuffer ws(runner.workspace_bytes());
  cudaStream_t stream;
  MXMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const int64_t sequence[] = {2, 37, 1, 192, 5, 64, 2, 9};
  struct Step {
    int64_t tokens;
    std::vector<uint16_t> hidden;
    std::vector<float> logits;
    DeviceBuffer d_hidden, d_logits, d_out;
  };
  std::vector<Step> steps;
  for (const int64_t t : sequence) {
    Step s{t, random_hidden(t, cfg.hidden, rng), random_logits(t, cfg.num_experts, rng), {}, {}, {}};
    s.d_hidden = to_device(s.hidden);
    s.d_logits = to_device(s.logits);
    s.d_out = DeviceBuffer(static_cast<size_t>(t * cfg.hidden) * 2);
    MXMOE_CUDA_CHECK(cudaMemset(s.d_out.get(), 0xFF, s.d_out.bytes()));
    steps.push_back(std::move(s));
  }
  for (const Step& s : steps)
    runner.forward(s.d_hidden.get<uint16_t>(), s.d_logits.get<float>(), s.tokens, s.d_out.get<uint16_t>(), ws.get(),
                   ws.bytes(), stream);
  MXMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (const Step& s : steps) {
    SCOPED_TRACE("T = " + std::to_string(s.tokens));
    const auto out = to_host<uint16_t>(s.d_out, static_cast<size_t>(s.tokens * cfg.hidden));
    std::vector<double> ref(out.size());
    reference_moe_f64(cfg, layer.view(), s.hidden, s.logits, s.tokens, ref);
    const ErrorStats e = compare(out, ref);
    EXPECT_EQ(e.nan_count, 0);
    EXPECT_LE(e.rel, 1e-2) << "worst element " << e.worst;
  }
  cudaStreamDestroy(stream);
}

// A forced plan selects other kernels of the family: every ring depth and split-K must compute the
// same layer. (The 2-stage ring is what SM120/SM121 run for gpt-oss; here it runs on this GPU.)
TEST(GpuLayerVariants, RingStagesAndSplitKMatchReference) {
  MXMOE_SKIP_WITHOUT_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const MoeConfig cfg = mxmoe::test::make_config(16, 4, 2880, 1440);
  const MoeLayerData layer = MoeLayerData::random(cfg, seed);
  const int64_t tokens = 5;
  const auto hidden = random_hidden(tokens, cfg.hidden, rng);
  const auto logits = random_logits(tokens, cfg.num_experts, rng);
  std::vector<double> ref(static_cast<size_t>(tokens * cfg.hidden));
  reference_moe_f64(cfg, layer.view(), hidden, logits, tokens, ref);
  for (const int stages : {2, 3})
    for (const int ksplit : {1, 2, 4, 8}) {
      if (!gemv::stages_built(stages)) continue;  // the minimal profile has 2 only
      PlanOverride plan;
      plan.gemv_stages = stages;
      plan.gemv_ksplit = ksplit;
      SCOPED_TRACE("plan " + to_string(plan));
      const MoeRunner runner(cfg, layer.view(), gemv_options(tokens, Backend::Gemv, plan));
      const ErrorStats e = compare(run_on_gpu(runner, hidden, logits, tokens), ref);
      EXPECT_EQ(e.nan_count, 0);
      EXPECT_LE(e.rel, 1e-2) << "worst element " << e.worst;
    }
}

// The shapes of the kernel-variant tests: several passes or m-tiles per expert (T = 1000 on 32
// experts, and one expert taking every token), fewer rows than a batch or tile (T = 3), K not a
// multiple of 128, wide scales, gpt-oss's K with 40 rows per expert, both K % 128 == 64 (the wgmma tiles'
// half chunk) with wide scales.
constexpr InputCase kVariantCases[] = {{32, 4, 256, 192, 1000, false, false}, {32, 4, 256, 192, 1000, true, false},
                                       {8, 2, 64, 64, 3, false, false},       {5, 3, 96, 160, 37, false, false},
                                       {16, 4, 384, 256, 300, false, true},   {8, 4, 2880, 2880, 80, false, false},
                                       {16, 4, 192, 320, 300, false, true}};

// The GEMV family's 16-row batch (two MMAs per decoded weight fragment, 16 warps per block) against
// the reference, and bit for bit against the 8-row batch without split-K: a column's sum runs in the
// same order in both.
TEST(GpuLayerVariants, WideBatchMatchesReferenceAndNarrowBatchBits) {
  MXMOE_SKIP_WITHOUT_GPU();
  if (!gemv::batch_rows_built(gemv::kWideBatchRows)) GTEST_SKIP() << "the minimal profile has no 16-row batch";
  int device = 0, optin = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), cudaSuccess);
  for (const InputCase& c : kVariantCases) {
    // Where 16 staged rows of this K do not fit (SM120/SM121 at K = 2880) the runner refuses batch=16.
    if (!gemv::wide_batch_fits(std::max(c.hidden, c.intermediate), static_cast<size_t>(optin), gemv::static_smem_bytes()))
      continue;
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(describe(c, seed));
    const LayerInputs in = make_inputs(c, seed);
    // The 8-row batch without split-K (a split sums K in another order; the 16-row batch never splits).
    auto runner_with = [&](int batch) {
      PlanOverride plan;
      plan.gemv_batch_rows = batch;
      plan.gemv_ksplit = 1;
      return MoeRunner(in.cfg, in.layer.view(), gemv_options(c.tokens, Backend::Gemv, plan));
    };
    const MoeRunner wide = runner_with(gemv::kWideBatchRows), narrow = runner_with(8);
    ASSERT_NE(wide.describe_plan(c.tokens).find("16x16"), std::string::npos) << wide.describe_plan(c.tokens);
    const auto out = run_checked(wide, in, c.tokens);
    EXPECT_EQ(out, run_on_gpu(narrow, in.hidden, in.logits, c.tokens)) << "16-row and 8-row batches differ";
    EXPECT_EQ(out, run_graph_replay(wide, in.hidden, in.logits, c.tokens)) << "graph replay differs from eager";
  }
}

// GEMV GEMM2 started per expert slot once GEMM1's blocks for it are counted done (the default with the
// route and combine kernels) against GEMM2 waiting for GEMM1's whole grid (plan counted=0): the
// same sums, so the same bits, over the variant shapes (T = 3 to 1000, odd K, one expert taking every
// token, wide scales), gpt-oss's shape at T = 4 and 16, both batch widths (the 16-row batch where
// it fits; row batches split over the grid's z at T = 1000), eager twice and in graph replay.
TEST(GpuLayerVariants, CountedGemvGemm2GivesTheGridWaitsBits) {
  MXMOE_SKIP_WITHOUT_GPU();
  int device = 0, optin = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), cudaSuccess);
  std::vector<InputCase> cases(std::begin(kVariantCases), std::end(kVariantCases));
  cases.push_back({128, 4, 2880, 2880, 4, false, false});
  cases.push_back({128, 4, 2880, 2880, 16, false, false});
  for (const InputCase& c : cases) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(describe(c, seed));
    const LayerInputs in = make_inputs(c, seed);
    for (const int batch : {8, gemv::kWideBatchRows}) {
      if (batch == gemv::kWideBatchRows &&
          (!gemv::batch_rows_built(gemv::kWideBatchRows) ||
           !gemv::wide_batch_fits(std::max(c.hidden, c.intermediate), static_cast<size_t>(optin), gemv::static_smem_bytes())))
        continue;
      SCOPED_TRACE("batch " + std::to_string(batch));
      auto runner_with = [&](bool counted) {
        PlanOverride plan;
        plan.gemv_counted = counted;
        plan.gemv_batch_rows = batch;
        return MoeRunner(in.cfg, in.layer.view(), gemv_options(c.tokens, Backend::Gemv, plan));
      };
      const MoeRunner counted = runner_with(true), grid_wait = runner_with(false);
      ASSERT_NE(counted.describe_plan(c.tokens).find("gemm2 per slot"), std::string::npos) << counted.describe_plan(c.tokens);
      ASSERT_EQ(grid_wait.describe_plan(c.tokens).find("gemm2 per slot"), std::string::npos);
      const auto out = run_checked(counted, in, c.tokens);
      EXPECT_EQ(out, run_on_gpu(grid_wait, in.hidden, in.logits, c.tokens)) << "counted and grid-wait GEMM2 differ";
      EXPECT_EQ(out, run_on_gpu(counted, in.hidden, in.logits, c.tokens)) << "two runs differ";
      EXPECT_EQ(out, run_graph_replay(counted, in.hidden, in.logits, c.tokens)) << "graph replay differs from eager";
    }
  }
}

// GEMM1's MXFP8 epilogue (the default of the MX backends) against the two-pass path that writes the
// fp32 intermediate and quantises it in a second expand (whose bytes test_gpu_expand checks against
// the CPU layout code): the same output bits. Shapes: I = 160 (5 k-blocks: padding k-blocks in the
// swizzled scales, and a last feature group of 32), rows that fill half an m-tile or spill past one
// (T = 37, 1000, one expert taking every token), T = 1, gpt-oss-120b's shape.
TEST(GpuLayerVariants, MxEpilogueMatchesTheSecondExpandBitForBit) {
  MXMOE_SKIP_WITHOUT_GPU();
  if (code_cc() < 89) GTEST_SKIP() << "the emulated MX atom needs sm_89 or newer code, this GPU runs sm_" << code_cc();
  const InputCase cases[] = {{5, 3, 96, 160, 37, false, false},  {32, 4, 256, 192, 1000, false, false},
                             {32, 4, 256, 192, 1000, true, false}, {8, 2, 64, 64, 1, false, false},
                             {128, 4, 2880, 2880, 64, false, false}};
  for (const InputCase& c : cases) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(describe(c, seed));
    const LayerInputs in = make_inputs(c, seed);
    const MoeConfig& cfg = in.cfg;
    const MoeLayerData& layer = in.layer;
    const std::vector<uint16_t>& hidden = in.hidden;
    const std::vector<float>& logits = in.logits;
    const MoeRunner fused(cfg, layer.view(), gemv_options(c.tokens, Backend::MxEmulated));
    const MoeRunner two_pass(cfg, layer.view(),
                             gemv_options(c.tokens, Backend::MxEmulated, parse_plan_override("mx_expand=1")));
    ASSERT_NE(fused.describe_plan(c.tokens).find("epilogue"), std::string::npos) << fused.describe_plan(c.tokens);
    ASSERT_NE(two_pass.describe_plan(c.tokens).find("expand before gemm2"), std::string::npos);
    const auto out = run_on_gpu(fused, hidden, logits, c.tokens);
    const ErrorStats e = compare(out, std::vector<double>(out.size(), 0.0));
    EXPECT_EQ(e.nan_count, 0) << "unwritten or non-finite outputs";
    EXPECT_EQ(out, run_on_gpu(two_pass, hidden, logits, c.tokens)) << "the epilogue and the second expand differ";
    EXPECT_EQ(out, run_graph_replay(fused, hidden, logits, c.tokens)) << "graph replay differs from eager";
  }
}

// Every tensor-core tile with the decode in registers (plan mma=16, 32, 64: rows of an expert per
// block) against the reference.
TEST(GpuLayerVariants, EveryTensorCoreTileMatchesReference) {
  MXMOE_SKIP_WITHOUT_GPU();
  for (const int m_tiles : {1, 2, 4}) {
    if (!mma::m_tiles_supported(m_tiles)) continue;
    for (const InputCase& c : kVariantCases) {
      const uint64_t seed = fresh_seed();
      PlanOverride plan;
      plan.mma_tile = MmaTileChoice{mma::block_m(m_tiles), MmaForm::Plain};
      SCOPED_TRACE("plan " + to_string(plan) + ", " + describe(c, seed));
      const LayerInputs in = make_inputs(c, seed);
      const MoeRunner runner(in.cfg, in.layer.view(), gemv_options(c.tokens, Backend::Mma, plan));
      ASSERT_NE(runner.describe_plan(c.tokens).find(std::to_string(mma::block_m(m_tiles)) + "x"), std::string::npos)
          << runner.describe_plan(c.tokens);
      const auto out = run_checked(runner, in, c.tokens);
      EXPECT_EQ(out, run_graph_replay(runner, in.hidden, in.logits, c.tokens)) << "graph replay differs from eager";
    }
  }
}

// One forced tensor-core tile over the variant shapes: plan mma=<form><16 * m_tiles>, the plan naming
// `plan_piece`; against the reference, graph replay and a second run bit-identical.
void expect_forced_tile_matches(MmaForm form, int m_tiles, const std::string& plan_piece) {
  for (const InputCase& c : kVariantCases) {
    const uint64_t seed = fresh_seed();
    PlanOverride plan;
    plan.mma_tile = MmaTileChoice{mma::block_m(m_tiles), form};
    SCOPED_TRACE("plan " + to_string(plan) + ", " + describe(c, seed));
    const LayerInputs in = make_inputs(c, seed);
    const MoeRunner runner(in.cfg, in.layer.view(), gemv_options(c.tokens, Backend::Mma, plan));
    ASSERT_NE(runner.describe_plan(c.tokens).find(plan_piece), std::string::npos) << runner.describe_plan(c.tokens);
    const auto out = run_checked(runner, in, c.tokens);
    EXPECT_EQ(out, run_graph_replay(runner, in.hidden, in.logits, c.tokens)) << "graph replay differs from eager";
    EXPECT_EQ(out, run_on_gpu(runner, in.hidden, in.logits, c.tokens)) << "two runs differ";
  }
}

// Every swap-AB tile (plan mma=swap16, swap32, swap64, swap128: weights on the MMA's M side,
// 16, 32, 64 or 128 rows of an expert on N, n8 groups past an expert's rows skipped) against the reference.
TEST(GpuLayerVariants, EverySwapTileMatchesReference) {
  MXMOE_SKIP_WITHOUT_GPU();
  for (const int m_tiles : {1, 2, 4, 8})
    if (mma::swap_supported(m_tiles))
      expect_forced_tile_matches(MmaForm::SwapAb, m_tiles,
                                 "swap-AB " + std::to_string(m_tiles == 8 ? 128 : 256) + "x" +
                                     std::to_string(mma::block_m(m_tiles)) + "x");
}

// Every wgmma tile (Hopper: plan mma=wgmma32, wgmma64, wgmma128) against the reference over
// the variant shapes (K not a multiple of 128: the chunk order's zero padding; tiles not a multiple
// of 16 or 4: a block's idle warps and warpgroups; an expert taking every token; experts with none;
// fewer rows than half or three quarters of a tile: the narrower wgmmas of the 64- and 128-row tiles),
// graph replay and repeated runs bit-identical.
TEST(GpuLayerVariants, EveryWgmmaTileMatchesReference) {
  MXMOE_SKIP_WITHOUT_GPU();
  int device = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  if (!sm90::wgmma_runs(device)) GTEST_SKIP() << "the wgmma tiles need a compute capability 9.0 GPU and sm_90a code";
  for (const int m_tiles : {2, 4, 8})
    expect_forced_tile_matches(MmaForm::Wgmma, m_tiles,
                               "wgmma bf16 " + std::to_string(sm90::kBlockWeightRows) + "x" +
                                   std::to_string(mma::block_m(m_tiles)) + "x");
}

// The wgmma tiles: a size they do not have or a value the key does not take is refused when the plan
// string is parsed; a forced tile is refused by its key where the tiles cannot run, or next to wgmma=0.
TEST(GpuLayerErrors, RefusesWgmmaTilesThatCannotRun) {
  expect_error_naming([] { parse_plan_override("wgmma=2", "MXMOE_PLAN"); }, "MXMOE_PLAN: wgmma=2 is not valid");
  expect_error_naming([] { parse_plan_override("mma=wgmma16", "MXMOE_PLAN"); }, "MXMOE_PLAN: mma=wgmma16 is not valid");
  MXMOE_SKIP_WITHOUT_GPU();
  int device = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  const MoeConfig cfg = mxmoe::test::make_config(8, 2, 64, 64);
  const MoeLayerData layer = MoeLayerData::random(cfg, fresh_seed());
  const auto refused = [&](const std::string& plan, const std::string& key) {
    SCOPED_TRACE(plan);
    expect_error_naming([&] { MoeRunner(cfg, layer.view(), gemv_options(4, Backend::Mma, parse_plan_override(plan))); },
                        "MXMOE_PLAN " + key + ":");
  };
  if (!sm90::wgmma_runs(device)) {
    for (const std::string tile : {"mma=wgmma32", "mma=wgmma64", "mma=wgmma128"}) refused(tile, tile);
    return;
  }
  refused("mma=wgmma64,wgmma=0", "mma=wgmma64");
  // Auto takes them at 64 rows per expert (T = 256 of 8 experts, top 2); wgmma=0 turns them off.
  const MoeRunner on(cfg, layer.view(), gemv_options(256, Backend::Auto));
  EXPECT_NE(on.describe_plan(256).find("wgmma"), std::string::npos) << on.describe_plan(256);
  const MoeRunner runner(cfg, layer.view(), gemv_options(256, Backend::Auto, parse_plan_override("wgmma=0")));
  EXPECT_EQ(runner.describe_plan(256).find("wgmma"), std::string::npos) << runner.describe_plan(256);
}

// The GEMV batch: a width the key does not take is refused when the plan string is parsed; the 16-row
// batch where it is not built (the minimal profile), or with a forced 3-stage ring (it runs 2 stages
// only), is refused by its key when the runner is built.
TEST(GpuLayerErrors, RefusesGemvBatchesThatCannotRun) {
  expect_error_naming([] { parse_plan_override("batch=32", "MXMOE_PLAN"); }, "MXMOE_PLAN: batch=32 is not valid");
  MXMOE_SKIP_WITHOUT_GPU();
  const MoeConfig cfg = mxmoe::test::make_config(4, 2, 64, 64);
  const MoeLayerData layer = MoeLayerData::random(cfg, fresh_seed());
  if (!gemv::batch_rows_built(gemv::kWideBatchRows))
    expect_error_naming([&] { MoeRunner(cfg, layer.view(), gemv_options(4, Backend::Gemv, parse_plan_override("batch=16"))); },
                        "MXMOE_PLAN batch=16:");
  if (gemv::stages_built(3))
    expect_error_naming(
        [&] { MoeRunner(cfg, layer.view(), gemv_options(4, Backend::Gemv, parse_plan_override("batch=16,stages=3"))); },
        "MXMOE_PLAN batch=16:");
}

// A forced 3-stage ring that does not fit is refused by name, not left to a failing launch. K = 11264
// fits 2 stages but not 3 in Hopper's 227 KB per block (about 207 KB against 224 KB). (The minimal
// profile has no 3-stage ring: refused by the same key.)
TEST(GpuLayerErrors, RefusesRingStagesThatDoNotFit) {
  MXMOE_SKIP_WITHOUT_GPU();
  int device = 0, optin = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), cudaSuccess);
  if (optin != 232448) GTEST_SKIP() << "the shape is sized for 227 KB of shared memory per block, this GPU has " << optin;
  const MoeConfig cfg = mxmoe::test::make_config(2, 1, 11264, 64);
  const MoeLayerData layer = MoeLayerData::random(cfg, fresh_seed());
  EXPECT_NO_THROW(MoeRunner(cfg, layer.view(), gemv_options(1)));
  expect_error_naming([&] { MoeRunner(cfg, layer.view(), gemv_options(1, Backend::Gemv, parse_plan_override("stages=3"))); },
                      "MXMOE_PLAN stages=3:");
}

// The native MX atom only exists for SM120/SM121: elsewhere the runner refuses it by name.
TEST(GpuLayerErrors, RefusesTheNativeMxAtomOffSm12x) {
  MXMOE_SKIP_WITHOUT_GPU();
  if (code_cc() / 10 == 12) GTEST_SKIP() << "this GPU runs SM12x code: the native atom is allowed here";
  const MoeConfig cfg = MoeConfig::tiny();
  const MoeLayerData layer = MoeLayerData::random(cfg, fresh_seed());
  expect_error_naming([&] { MoeRunner(cfg, layer.view(), gemv_options(4, Backend::Mx)); }, "'mx' needs an SM120/SM121");
}

// A plan value a key does not take is an Error naming the key when the string is parsed (no GPU
// needed); a value the key takes but this build or device cannot run is an Error naming the key when
// the runner is built, and one it can run is taken.
TEST(GpuLayerErrors, RejectsPlanValuesNamingTheKey) {
  // The old knobs' refused values, in MXMOE_PLAN's form: 48 and (plain) 128-row tiles do not exist.
  for (const char* text : {"fused_combine=9", "local_route=5", "cluster_combine=2", "counted=2", "ksplit=3",
                           "stages=4", "mx_expand=2", "mma=48", "mma=128", "mma=swap8"}) {
    SCOPED_TRACE(text);
    expect_error_naming([&] { parse_plan_override(text, "MXMOE_PLAN"); }, std::string("MXMOE_PLAN: ") + text + " is not valid");
  }
  expect_error_naming([] { parse_plan_override("gemv_ksplit=4", "MXMOE_PLAN"); }, "MXMOE_PLAN: unknown key 'gemv_ksplit'");
  expect_error_naming([] { parse_plan_override("ksplit", "MXMOE_PLAN"); }, "MXMOE_PLAN: 'ksplit' is not key=value");
  MXMOE_SKIP_WITHOUT_GPU();
  int device = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  const MoeConfig cfg = MoeConfig::tiny();
  const MoeLayerData layer = MoeLayerData::random(cfg, fresh_seed());
  struct Forced {
    MmaTileChoice tile;
    bool runs;  // this build has it and it runs on this device
    std::string plan_piece;
  };
  std::vector<Forced> tiles;
  for (const int m_tiles : {1, 2, 4})
    tiles.push_back({{mma::block_m(m_tiles), MmaForm::Plain}, mma::m_tiles_supported(m_tiles),
                     "mma bf16 " + std::to_string(mma::block_m(m_tiles)) + "x"});
  for (const int m_tiles : {1, 2, 4, 8})
    tiles.push_back({{mma::block_m(m_tiles), MmaForm::SwapAb}, mma::swap_supported(m_tiles),
                     "swap-AB " + std::to_string(m_tiles == 8 ? 128 : 256) + "x" + std::to_string(mma::block_m(m_tiles)) + "x"});
  for (const int m_tiles : {2, 4, 8})
    tiles.push_back({{mma::block_m(m_tiles), MmaForm::Wgmma}, sm90::wgmma_runs(device),
                     "wgmma bf16 " + std::to_string(sm90::kBlockWeightRows) + "x" + std::to_string(mma::block_m(m_tiles)) + "x"});
  for (const Forced& f : tiles) {
    PlanOverride plan;
    plan.mma_tile = f.tile;
    SCOPED_TRACE("plan " + to_string(plan));
    if (!f.runs) {
      expect_error_naming([&] { MoeRunner(cfg, layer.view(), gemv_options(4, Backend::Mma, plan)); },
                          "MXMOE_PLAN mma=" + to_string(f.tile) + ":");
      continue;
    }
    try {
      const MoeRunner runner(cfg, layer.view(), gemv_options(4, Backend::Mma, plan));
      EXPECT_NE(runner.describe_plan(4).find(f.plan_piece), std::string::npos) << runner.describe_plan(4);
    } catch (const Error& e) {
      ADD_FAILURE() << "refused a tile this build runs here: " << e.what();
    }
  }
  // The ring depths: 3 stages only in the full profile.
  for (const int stages : {2, 3}) {
    SCOPED_TRACE("stages " + std::to_string(stages));
    PlanOverride plan;
    plan.gemv_stages = stages;
    if (gemv::stages_built(stages))
      EXPECT_NO_THROW(MoeRunner(cfg, layer.view(), gemv_options(4, Backend::Gemv, plan)));
    else
      expect_error_naming([&] { MoeRunner(cfg, layer.view(), gemv_options(4, Backend::Gemv, plan)); },
                          "MXMOE_PLAN stages=" + std::to_string(stages) + ":");
  }
}

// MXMOE_PLAN in the environment forces the plan of a runner whose options force nothing, and options
// that force something win over it (the one test of the environment reader's MXMOE_PLAN).
TEST(GpuLayerEnvironment, MxmoePlanForcesWhereTheOptionsDoNot) {
  MXMOE_SKIP_WITHOUT_GPU();
  const MoeConfig cfg = mxmoe::test::make_config(32, 4, 512, 384);
  const MoeLayerData layer = MoeLayerData::random(cfg, fresh_seed());
  const auto combines = [](const MoeRunner& runner, int64_t tokens) {
    return runner.describe_plan(tokens).find("combine in gemm2") != std::string::npos;
  };
  // Both ways, so that neither check can pass by the default alone.
  {
    const ScopedEnv env("MXMOE_PLAN", "fused_combine=0");
    const MoeRunner from_env(cfg, layer.view(), gemv_options(8));
    EXPECT_FALSE(combines(from_env, 1)) << from_env.describe_plan(1);
  }
  const ScopedEnv env("MXMOE_PLAN", "fused_combine=8");
  const MoeRunner from_env(cfg, layer.view(), gemv_options(8));
  EXPECT_TRUE(combines(from_env, 8)) << from_env.describe_plan(8);
  // Options that force anything replace MXMOE_PLAN as a whole.
  const MoeRunner from_options(cfg, layer.view(), gemv_options(8, Backend::Gemv, parse_plan_override("fused_combine=0")));
  EXPECT_FALSE(combines(from_options, 8)) << from_options.describe_plan(8);
}

TEST(GpuLayerErrors, RejectsHostPointersAndSmallWorkspace) {
  MXMOE_SKIP_WITHOUT_GPU();
  const MoeConfig cfg = MoeConfig::tiny();
  const MoeLayerData layer = MoeLayerData::random(cfg, fresh_seed());
  const MoeRunner runner(cfg, layer.view(), gemv_options(4));
  std::vector<uint16_t> hidden(4 * 64, 0x3F80), out(4 * 64);
  std::vector<float> logits(4 * 8, 1.f);
  DeviceBuffer ws(runner.workspace_bytes());
  try {
    runner.forward(hidden.data(), logits.data(), 4, out.data(), ws.get(), ws.bytes());
    FAIL() << "host pointers were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("hidden"), std::string::npos) << e.what();
  }
  EXPECT_THROW(runner.forward(hidden.data(), logits.data(), 4, out.data(), ws.get(), ws.bytes() - 1), Error);
  EXPECT_THROW(runner.forward(hidden.data(), logits.data(), 5, out.data(), ws.get(), ws.bytes()), Error);
}

}  // namespace
}  // namespace mxmoe::test
