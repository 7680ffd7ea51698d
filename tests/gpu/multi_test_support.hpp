#pragma once
// What the multi-GPU tests share: the GPU count and the skip, a world of NCCL communicators on GPUs
// 0 .. n-1 with a stream each, fn(rank) on one thread per rank, and a layer's shards on their GPUs.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#if MXMOE_HAVE_NCCL
#include <nccl.h>
#endif

#include "gpu/gpu_test_support.hpp"
#include "mxmoe/shard.hpp"
#include "mxmoe/sharded_moe.hpp"

namespace mxmoe::test {

inline int gpu_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

#define MXMOE_SKIP_WITHOUT_GPUS(world)                                                                  \
  do {                                                                                                  \
    MXMOE_SKIP_WITHOUT_GPU();                                                                           \
    if (!::mxmoe::nccl_available()) GTEST_SKIP() << "this build has no NCCL (MXMOE_NCCL_ROOT)";          \
    if (gpu_count() < (world))                                                                          \
      GTEST_SKIP() << "needs " << (world) << " GPUs, found " << gpu_count();                            \
  } while (0)

#if MXMOE_HAVE_NCCL


inline void nccl_ok(ncclResult_t r) { ASSERT_EQ(r, ncclSuccess) << ncclGetErrorString(r); }

// A world of `n` ranks on GPUs 0 .. n-1: one communicator and one stream each.
struct World {
  explicit World(int n) : comms(n), streams(n) {
    std::vector<int> devices(n);
    for (int r = 0; r < n; ++r) devices[r] = r;
    nccl_ok(ncclCommInitAll(comms.data(), n, devices.data()));
    for (int r = 0; r < n; ++r) {
      MXMOE_CUDA_CHECK(cudaSetDevice(r));
      MXMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
    }
    MXMOE_CUDA_CHECK(cudaSetDevice(0));
  }
  ~World() {
    for (size_t r = 0; r < comms.size(); ++r) {
      cudaSetDevice(static_cast<int>(r));
      cudaStreamDestroy(streams[r]);
      ncclCommDestroy(comms[r]);
    }
    cudaSetDevice(0);
  }
  int size() const { return static_cast<int>(comms.size()); }
  std::vector<ncclComm_t> comms;
  std::vector<cudaStream_t> streams;
};

// fn(rank) on one thread per rank, each on its rank's GPU; returns when all are done (a barrier), and
// rethrows the first exception a rank threw.
template <class Fn>
void on_ranks(int n, Fn&& fn) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        MXMOE_CUDA_CHECK(cudaSetDevice(r));
        fn(r);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// A parameterised multi-GPU case and its test name (gpt_oss_20b_tensor_2_fp32).
struct MultiCase {
  const char* model;
  ShardMode mode;
  int world;
  bool fp32 = false;  // fp32 partials
};
inline std::string multi_case_name(const ::testing::TestParamInfo<MultiCase>& info) {
  std::string name = std::string(info.param.model) + "_" + to_string(info.param.mode) + "_" +
                     std::to_string(info.param.world) + (info.param.fp32 ? "_fp32" : "");
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

// One rank: its ShardedMoe and its device buffers, on GPU `rank`.
struct Rank {
  std::unique_ptr<ShardedMoe> moe;
  DeviceBuffer hidden, logits, out, workspace;
};

struct Sharded {
  std::vector<Rank> ranks;
};

// Each rank's workspace: workspace_bytes(), or with data_parallel data_parallel_workspace_bytes().
inline Sharded make_sharded(World& world, const MoeConfig& config, const MoeLayerData& whole, ShardMode mode,
                     int64_t max_tokens, std::vector<ShardSpec> specs = {}, bool fp32_partials = false,
                     bool data_parallel = false) {
  Sharded s;
  for (int r = 0; r < world.size(); ++r) {
    MXMOE_CUDA_CHECK(cudaSetDevice(r));
    const ShardSpec spec = !specs.empty()                ? specs[r]
                           : mode == ShardMode::Tensor ? ShardSpec::tensor(r, world.size())
                                                       : ShardSpec::expert(r, world.size());
    const LayerShard shard = resolve_shard(config, spec);
    const MoeLayerData part = slice_layer(shard, whole);
    Rank rank;
    rank.moe = std::make_unique<ShardedMoe>(shard, part.view(), gemv_options(max_tokens, Backend::Auto), world.comms[r],
                                            fp32_partials);
    rank.workspace = DeviceBuffer(std::max<size_t>(
        data_parallel ? rank.moe->data_parallel_workspace_bytes() : rank.moe->workspace_bytes(), 1));
    s.ranks.push_back(std::move(rank));
  }
  MXMOE_CUDA_CHECK(cudaSetDevice(0));
  return s;
}

#endif  // MXMOE_HAVE_NCCL

}  // namespace mxmoe::test
