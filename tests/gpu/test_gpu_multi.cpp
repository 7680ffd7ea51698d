// Several GPUs (issue 45): one process drives every GPU, the ranks' communicators from ncclCommInitAll;
// their forwards issued by one thread in one NCCL group, or by one thread per rank (graphs, and the
// data-parallel forward). Tensor- and expert-parallel shards of random
// checkpoint-like gpt-oss layers, summed by ShardedMoe's all-reduce, against the one-GPU output of the
// same layer and the fp64 reference. Skips itself (with the reason) below 2 GPUs or without NCCL.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#if MXMOE_HAVE_NCCL
#include <nccl.h>
#endif

#include "gpu/multi_test_support.hpp"

namespace mxmoe::test {
namespace {

// MoeRunner::forward_f32 (the fp32 partials' source) rounded to bf16 is forward()'s output, bit for bit,
// on every plan of the auto backend (the GEMV plans then combine in their own kernel).
TEST(GpuF32Output, RoundsToTheForwardBits) {
  MXMOE_SKIP_WITHOUT_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const MoeConfig c = MoeConfig::gpt_oss_20b();
  const MoeLayerData whole = MoeLayerData::random(c, seed);
  const MoeRunner runner(c, whole.view(), gemv_options(1000, Backend::Auto));
  for (int64_t tokens : {1, 3, 8, 64, 1000}) {
    SCOPED_TRACE("T = " + std::to_string(tokens) + ", plan " + runner.describe_plan(tokens));
    const auto hidden = random_hidden(tokens, c.hidden, rng);
    const auto logits = random_logits(tokens, c.num_experts, rng);
    const auto expect = run_on_gpu(runner, hidden, logits, tokens);
    const DeviceBuffer d_hidden = to_device(hidden), d_logits = to_device(logits);
    DeviceBuffer d_out(static_cast<size_t>(tokens) * c.hidden * 4), ws(runner.workspace_bytes());
    MXMOE_CUDA_CHECK(cudaMemset(d_out.get(), 0xFF, d_out.bytes()));
    MXMOE_CUDA_CHECK(cudaMemset(ws.get(), 0xFF, ws.bytes()));
    runner.forward_f32(d_hidden.get<uint16_t>(), d_logits.get<float>(), tokens, d_out.get<float>(), ws.get(),
                       ws.bytes());
    MXMOE_CUDA_CHECK(cudaDeviceSynchronize());
    const auto got = to_host<float>(d_out, static_cast<size_t>(tokens) * c.hidden);
    size_t differ = 0;
    for (size_t i = 0; i < got.size(); ++i) differ += float_to_bf16(got[i]) != expect[i];
    EXPECT_EQ(differ, 0u) << "elements whose rounded fp32 output is not forward()'s";
  }
}

#if MXMOE_HAVE_NCCL

// The layer's output through every rank (poisoned outputs and workspaces first); every rank's copy of
// it must be the same bits (the all-reduce gives each rank the sum). `graph`: captured and replayed.
std::vector<uint16_t> run_sharded(World& world, Sharded& s, const std::vector<uint16_t>& hidden,
                                  const std::vector<float>& logits, int64_t tokens, int hidden_size, bool graph = false) {
  const size_t n = static_cast<size_t>(tokens) * hidden_size;
  for (int r = 0; r < world.size(); ++r) {
    MXMOE_CUDA_CHECK(cudaSetDevice(r));
    Rank& k = s.ranks[r];
    k.hidden = to_device(hidden);
    k.logits = to_device(logits);
    k.out = DeviceBuffer(std::max<size_t>(n * 2, 2));
    MXMOE_CUDA_CHECK(cudaMemset(k.out.get(), 0xFF, k.out.bytes()));
    MXMOE_CUDA_CHECK(cudaMemset(k.workspace.get(), 0xFF, k.workspace.bytes()));
    MXMOE_CUDA_CHECK(cudaDeviceSynchronize());
  }
  if (!graph) {
    // One thread drives every rank: their forwards and collectives in one NCCL group (forward_ranks).
    std::vector<const ShardedMoe*> moes;
    std::vector<ShardedMoe::RankForward> io;
    for (int r = 0; r < world.size(); ++r) {
      Rank& k = s.ranks[r];
      moes.push_back(k.moe.get());
      io.push_back({k.hidden.get<uint16_t>(), k.logits.get<float>(), k.out.get<uint16_t>(), k.workspace.get(),
                    k.workspace.bytes(), world.streams[r]});
    }
    ShardedMoe::forward_ranks(moes, io, tokens);
  } else {
    // One thread per rank, as engines run (one process per GPU): each captures its own forward, all-reduce
    // included, and replays it. Every graph is uploaded before any is launched: a first launch that
    // allocates on one GPU while a peer's NCCL kernel waits for it can deadlock.
    std::vector<cudaGraph_t> graphs(world.size());
    std::vector<cudaGraphExec_t> execs(world.size());
    on_ranks(world.size(), [&](int r) {
      Rank& k = s.ranks[r];
      MXMOE_CUDA_CHECK(cudaStreamBeginCapture(world.streams[r], cudaStreamCaptureModeThreadLocal));
      k.moe->forward(k.hidden.get<uint16_t>(), k.logits.get<float>(), tokens, k.out.get<uint16_t>(), k.workspace.get(),
                     k.workspace.bytes(), world.streams[r]);
      MXMOE_CUDA_CHECK(cudaStreamEndCapture(world.streams[r], &graphs[r]));
      MXMOE_CUDA_CHECK(cudaGraphInstantiate(&execs[r], graphs[r], 0));
      MXMOE_CUDA_CHECK(cudaGraphUpload(execs[r], world.streams[r]));
      MXMOE_CUDA_CHECK(cudaStreamSynchronize(world.streams[r]));
    });
    on_ranks(world.size(), [&](int r) {
      for (int replay = 0; replay < 3; ++replay) MXMOE_CUDA_CHECK(cudaGraphLaunch(execs[r], world.streams[r]));
      MXMOE_CUDA_CHECK(cudaStreamSynchronize(world.streams[r]));
      MXMOE_CUDA_CHECK(cudaGraphExecDestroy(execs[r]));
      MXMOE_CUDA_CHECK(cudaGraphDestroy(graphs[r]));
    });
  }
  std::vector<uint16_t> out0;
  for (int r = 0; r < world.size(); ++r) {
    MXMOE_CUDA_CHECK(cudaSetDevice(r));
    MXMOE_CUDA_CHECK(cudaStreamSynchronize(world.streams[r]));
    const auto out = to_host<uint16_t>(s.ranks[r].out, n);
    if (r == 0)
      out0 = out;
    else
      EXPECT_TRUE(out == out0) << "rank " << r << "'s output differs from rank 0's";
  }
  MXMOE_CUDA_CHECK(cudaSetDevice(0));
  return out0;
}

// The fp64 reference of the first and last `rows` tokens (a token's output depends on it alone), as
// [out, ref] pairs over those tokens: the whole reference at T = 4096 of gpt-oss-120b is minutes of CPU.
void expect_near_reference(const MoeConfig& c, const MoeLayerData& whole, const std::vector<uint16_t>& hidden,
                           const std::vector<float>& logits, int64_t tokens, const std::vector<uint16_t>& out) {
  const int64_t rows = 32, H = c.hidden, E = c.num_experts;
  std::vector<int64_t> picked;
  for (int64_t t = 0; t < tokens; ++t)
    if (t < rows || t >= tokens - rows) picked.push_back(t);
  std::vector<uint16_t> h, o;
  std::vector<float> l;
  for (int64_t t : picked) {
    h.insert(h.end(), hidden.begin() + t * H, hidden.begin() + (t + 1) * H);
    l.insert(l.end(), logits.begin() + t * E, logits.begin() + (t + 1) * E);
    o.insert(o.end(), out.begin() + t * H, out.begin() + (t + 1) * H);
  }
  const auto n = static_cast<int64_t>(picked.size());
  std::vector<double> ref(static_cast<size_t>(n * H));
  reference_moe_f64(c, whole.view(), h, l, n, ref);
  const ErrorStats s = compare(o, ref);
  EXPECT_EQ(s.nan_count, 0);
  EXPECT_LE(s.rel, 1e-2) << "relative error to the fp64 reference; worst element " << s.worst;
}

class GpuMulti : public ::testing::TestWithParam<MultiCase> {};

TEST_P(GpuMulti, SummedShardsMatchOneGpuAndReference) {
  const MultiCase mc = GetParam();
  MXMOE_SKIP_WITHOUT_GPUS(mc.world);
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const MoeConfig c = MoeConfig::preset(mc.model);
  const MoeLayerData whole = MoeLayerData::random(c, seed);
  const int64_t max_tokens = 4096;
  World world(mc.world);
  Sharded sharded = make_sharded(world, c, whole, mc.mode, max_tokens, {}, mc.fp32);
  MXMOE_CUDA_CHECK(cudaSetDevice(0));
  const MoeRunner single(c, whole.view(), gemv_options(max_tokens, Backend::Auto));
  for (int64_t tokens : {0, 1, 3, 64, 1000, 4096}) {
    SCOPED_TRACE("T = " + std::to_string(tokens));
    const auto hidden = random_hidden(tokens, c.hidden, rng);
    const auto logits = random_logits(tokens, c.num_experts, rng);
    const auto out = run_sharded(world, sharded, hidden, logits, tokens, c.hidden);
    MXMOE_CUDA_CHECK(cudaSetDevice(0));
    const auto one = run_on_gpu(single, hidden, logits, tokens);
    // Against the one-GPU output: bf16 partials round twice (a few bf16 ulps); fp32 partials once, so they
    // differ from it by the fp32 summation order and one bf16 rounding (within 1 ulp, 2^-8 relative).
    std::vector<double> one_f64(one.size());
    for (size_t i = 0; i < one.size(); ++i) one_f64[i] = bf16_to_float(one[i]);
    const ErrorStats s = compare(out, one_f64);
    EXPECT_EQ(s.nan_count, 0);
    EXPECT_LE(s.rel, mc.fp32 ? 4e-3 : 1e-2) << "relative difference to one GPU; worst element " << s.worst;
    RecordProperty("rel_vs_one_gpu_T" + std::to_string(tokens), std::to_string(s.rel));
    std::printf("%s %s world %d %s partials T %lld: relative difference to one GPU %.3g\n", mc.model,
                to_string(mc.mode).c_str(), mc.world, mc.fp32 ? "fp32" : "bf16", static_cast<long long>(tokens), s.rel);
    expect_near_reference(c, whole, hidden, logits, tokens, out);
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, GpuMulti,
                         ::testing::Values(MultiCase{"gpt-oss-20b", ShardMode::Tensor, 2},
                                           MultiCase{"gpt-oss-20b", ShardMode::Expert, 2},
                                           MultiCase{"gpt-oss-120b", ShardMode::Tensor, 2},
                                           MultiCase{"gpt-oss-120b", ShardMode::Expert, 2},
                                           MultiCase{"gpt-oss-20b", ShardMode::Tensor, 4},
                                           MultiCase{"gpt-oss-20b", ShardMode::Expert, 4},
                                           MultiCase{"gpt-oss-120b", ShardMode::Tensor, 4},
                                           MultiCase{"gpt-oss-120b", ShardMode::Expert, 4},
                                           MultiCase{"gpt-oss-120b", ShardMode::Tensor, 2, true},
                                           MultiCase{"gpt-oss-20b", ShardMode::Expert, 2, true},
                                           MultiCase{"gpt-oss-120b", ShardMode::Tensor, 4, true}),
                         multi_case_name);

// Expert-parallel where every token picks experts of rank 0 only: rank 1's experts get no tokens, and at
// T = 1 rank 1 owns none of the token's experts (every pair dropped in its route); its partial is an
// exact zero, so the sum is rank 0's. Also the same through CUDA graphs, one thread per rank.
TEST(GpuMultiEdges, ExpertsWithoutTokensAndARankWithoutTheTokensExperts) {
  MXMOE_SKIP_WITHOUT_GPUS(2);
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const MoeConfig c = MoeConfig::gpt_oss_20b();
  const MoeLayerData whole = MoeLayerData::random(c, seed);
  World world(2);
  Sharded ep = make_sharded(world, c, whole, ShardMode::Expert, 256);
  Sharded tp = make_sharded(world, c, whole, ShardMode::Tensor, 256);
  MXMOE_CUDA_CHECK(cudaSetDevice(0));
  const MoeRunner single(c, whole.view(), gemv_options(256, Backend::Auto));
  for (int64_t tokens : {1, 3, 200}) {
    SCOPED_TRACE("T = " + std::to_string(tokens));
    const auto hidden = random_hidden(tokens, c.hidden, rng);
    auto logits = random_logits(tokens, c.num_experts, rng);
    for (int64_t t = 0; t < tokens; ++t)
      for (int e = 0; e < c.top_k; ++e) logits[static_cast<size_t>(t * c.num_experts + (e * 3 + t) % 16)] += 50.f;
    for (bool graph : {false, true}) {
      SCOPED_TRACE(graph ? "graph" : "eager");
      const auto one = run_on_gpu(single, hidden, logits, tokens);
      std::vector<double> one_f64(one.size());
      for (size_t i = 0; i < one.size(); ++i) one_f64[i] = bf16_to_float(one[i]);
      for (Sharded* s : {&ep, &tp}) {
        const auto out = run_sharded(world, *s, hidden, logits, tokens, c.hidden, graph);
        const ErrorStats e = compare(out, one_f64);
        EXPECT_EQ(e.nan_count, 0);
        EXPECT_LE(e.rel, 1e-2) << (s == &ep ? "EP" : "TP") << "; worst element " << e.worst;
      }
    }
    // Rank 1's own partial (no collective): exact zeros, its experts having no token.
    MXMOE_CUDA_CHECK(cudaSetDevice(1));
    Rank& k = ep.ranks[1];
    MXMOE_CUDA_CHECK(cudaMemset(k.out.get(), 0xFF, k.out.bytes()));
    k.moe->forward_partial(k.hidden.get<uint16_t>(), k.logits.get<float>(), tokens, k.out.get<uint16_t>(),
                           k.workspace.get(), k.workspace.bytes(), world.streams[1]);
    MXMOE_CUDA_CHECK(cudaStreamSynchronize(world.streams[1]));
    const auto partial = to_host<uint16_t>(k.out, static_cast<size_t>(tokens * c.hidden));
    MXMOE_CUDA_CHECK(cudaSetDevice(0));
    EXPECT_TRUE(std::all_of(partial.begin(), partial.end(), [](uint16_t v) { return (v & 0x7FFF) == 0; }))
        << "rank 1's partial is not zero";
  }
}

// An explicit expert map (experts dealt round-robin) gives the layer too.
TEST(GpuMultiEdges, ExpertMapRoundRobin) {
  MXMOE_SKIP_WITHOUT_GPUS(2);
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const MoeConfig c = MoeConfig::gpt_oss_20b();
  const MoeLayerData whole = MoeLayerData::random(c, seed);
  std::vector<ShardSpec> specs;
  for (int r = 0; r < 2; ++r) {
    ShardSpec s = ShardSpec::expert(r, 2);
    s.expert_map.assign(c.num_experts, -1);
    for (int e = r; e < c.num_experts; e += 2) s.expert_map[e] = e / 2;
    specs.push_back(s);
  }
  World world(2);
  Sharded ep = make_sharded(world, c, whole, ShardMode::Expert, 64, specs);
  const auto hidden = random_hidden(64, c.hidden, rng);
  const auto logits = random_logits(64, c.num_experts, rng);
  const auto out = run_sharded(world, ep, hidden, logits, 64, c.hidden);
  expect_near_reference(c, whole, hidden, logits, 64, out);
}

#else

TEST(GpuMultiEdges, SkippedWithoutNccl) { GTEST_SKIP() << "this build has no NCCL (MXMOE_NCCL_ROOT): no multi-GPU tests"; }

#endif

}  // namespace
}  // namespace mxmoe::test
