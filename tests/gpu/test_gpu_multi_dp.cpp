// Several GPUs, data-parallel tokens (issue 45): ShardedMoe::forward_data_parallel, one thread per rank,
// each rank holding its own tokens. Skips itself (with the reason) below the world's GPUs or without NCCL.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <type_traits>
#include <vector>

#include "gpu/multi_test_support.hpp"
#include "mxmoe/reference.hpp"

namespace mxmoe::test {
namespace {

#if MXMOE_HAVE_NCCL

// Data-parallel tokens (forward_data_parallel): rank r holds tokens [r T, (r + 1) T) of a batch and gets
// their output, against the one-GPU output of the whole batch, routed by the logits and by the engine's
// int64 ids (the host reference's routing). One thread per rank.
class GpuMultiDataParallel : public ::testing::TestWithParam<MultiCase> {};

TEST_P(GpuMultiDataParallel, EachRankGetsItsTokensOutput) {
  const MultiCase dc = GetParam();
  MXMOE_SKIP_WITHOUT_GPUS(dc.world);
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const MoeConfig c = MoeConfig::preset(dc.model);
  const MoeLayerData whole = MoeLayerData::random(c, seed);
  const int64_t max_tokens = 4096;
  World world(dc.world);
  Sharded sharded = make_sharded(world, c, whole, dc.mode, max_tokens, {}, dc.fp32, true);
  for (int r = 0; r < dc.world; ++r) {  // forward's workspace is smaller, and the data-parallel one refuses it
    MXMOE_CUDA_CHECK(cudaSetDevice(r));
    const Rank& rk = sharded.ranks[r];
    EXPECT_LT(rk.moe->workspace_bytes(), rk.moe->data_parallel_workspace_bytes()) << "rank " << r;
    auto* any = static_cast<uint16_t*>(rk.workspace.get());
    expect_error_naming([&] { rk.moe->forward_data_parallel(any, reinterpret_cast<const float*>(any), 1, any, any,
                                                              rk.moe->workspace_bytes(), world.streams[r]); },
                        "data_parallel_workspace_bytes");
  }
  MXMOE_CUDA_CHECK(cudaSetDevice(0));
  const MoeRunner single(c, whole.view(), gemv_options(max_tokens, Backend::Auto));
  const int64_t H = c.hidden, E = c.num_experts, k = c.top_k;
  for (int64_t tokens : {0, 1, 3, 64, 1000}) {
    const int64_t all = tokens * dc.world;
    SCOPED_TRACE("T = " + std::to_string(tokens) + " per rank");
    const auto hidden = random_hidden(all, c.hidden, rng);
    const auto logits = random_logits(all, c.num_experts, rng);
    std::vector<int32_t> ids32(static_cast<size_t>(all * k));
    std::vector<float> weights(ids32.size());
    reference_route(c, logits, all, ids32, weights);
    const std::vector<int64_t> ids(ids32.begin(), ids32.end());
    MXMOE_CUDA_CHECK(cudaSetDevice(0));
    const auto one = run_on_gpu(single, hidden, logits, all);
    for (bool routed : {false, true}) {
      SCOPED_TRACE(routed ? "routed" : "logits");
      std::vector<DeviceBuffer> d_ids(dc.world), d_weights(dc.world);
      for (int r = 0; r < dc.world; ++r) {
        MXMOE_CUDA_CHECK(cudaSetDevice(r));
        Rank& rk = sharded.ranks[r];
        const auto rows = [&](const auto& v, int64_t width) {
          using T = typename std::decay_t<decltype(v)>::value_type;
          return std::vector<T>(v.begin() + r * tokens * width, v.begin() + (r + 1) * tokens * width);
        };
        rk.hidden = to_device(rows(hidden, H));
        rk.logits = to_device(rows(logits, E));
        d_ids[r] = to_device(rows(ids, k));
        d_weights[r] = to_device(rows(weights, k));
        rk.out = DeviceBuffer(std::max<size_t>(static_cast<size_t>(tokens * H) * 2, 2));
        MXMOE_CUDA_CHECK(cudaMemset(rk.out.get(), 0xFF, rk.out.bytes()));
        MXMOE_CUDA_CHECK(cudaMemset(rk.workspace.get(), 0xFF, rk.workspace.bytes()));
        MXMOE_CUDA_CHECK(cudaDeviceSynchronize());
      }
      on_ranks(dc.world, [&](int r) {
        Rank& rk = sharded.ranks[r];
        if (routed)
          rk.moe->forward_data_parallel(rk.hidden.get<uint16_t>(), d_ids[r].get<int64_t>(), d_weights[r].get<float>(),
                                        tokens, rk.out.get<uint16_t>(), rk.workspace.get(), rk.workspace.bytes(),
                                        world.streams[r]);
        else
          rk.moe->forward_data_parallel(rk.hidden.get<uint16_t>(), rk.logits.get<float>(), tokens,
                                        rk.out.get<uint16_t>(), rk.workspace.get(), rk.workspace.bytes(),
                                        world.streams[r]);
        MXMOE_CUDA_CHECK(cudaStreamSynchronize(world.streams[r]));
      });
      for (int r = 0; r < dc.world; ++r) {
        MXMOE_CUDA_CHECK(cudaSetDevice(r));
        const auto got = to_host<uint16_t>(sharded.ranks[r].out, static_cast<size_t>(tokens * H));
        std::vector<double> want(got.size());
        for (size_t i = 0; i < want.size(); ++i) want[i] = bf16_to_float(one[static_cast<size_t>(r * tokens * H) + i]);
        const ErrorStats e = compare(got, want);
        EXPECT_EQ(e.nan_count, 0) << "rank " << r;
        EXPECT_LE(e.rel, dc.fp32 ? 4e-3 : 1e-2) << "rank " << r << ": relative difference to one GPU; worst " << e.worst;
        std::printf("%s %s world %d data-parallel %s %s T %lld rank %d: relative difference to one GPU %.3g\n", dc.model,
                    to_string(dc.mode).c_str(), dc.world, dc.fp32 ? "fp32" : "bf16", routed ? "routed" : "logits",
                    static_cast<long long>(tokens), r, e.rel);
      }
    }
  }
  MXMOE_CUDA_CHECK(cudaSetDevice(0));
}

INSTANTIATE_TEST_SUITE_P(Worlds, GpuMultiDataParallel,
                         ::testing::Values(MultiCase{"gpt-oss-20b", ShardMode::Expert, 2},
                                           MultiCase{"gpt-oss-120b", ShardMode::Expert, 2},
                                           MultiCase{"gpt-oss-20b", ShardMode::Tensor, 2, true},
                                           MultiCase{"gpt-oss-20b", ShardMode::Expert, 4},
                                           MultiCase{"gpt-oss-120b", ShardMode::Expert, 4, true}),
                         multi_case_name);

#else

TEST(GpuMultiDataParallel, SkippedWithoutNccl) { GTEST_SKIP() << "this build has no NCCL (MXMOE_NCCL_ROOT)"; }

#endif

}  // namespace
}  // namespace mxmoe::test
