#pragma once
// Shared helpers of the GPU tests: skipping without a GPU, random inputs, device round trips and
// error measurement against the fp64 CPU reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "kernels/common/code_arch.hpp"
#include "mxmoe/mxmoe.hpp"
#include "test_support.hpp"

namespace mxmoe::test {

#define MXMOE_SKIP_WITHOUT_GPU()                                                     \
  do {                                                                               \
    if (!::mxmoe::gpu_available())                                                   \
      GTEST_SKIP() << "no usable GPU: " << ::mxmoe::probe().no_gpu_reason;           \
  } while (0)


// The compute capability x 10 of the code the current GPU runs (code_arch.hpp): 80 for a compute_80 build
// on a Hopper, whose kernels have no FP8 mma.sync, wgmma or clusters.
inline int code_cc() { return kernels::current_code_arch(); }

// The MX backends' atoms run here: the emulated one is an FP8 mma.sync (sm_89 and newer code), the
// native one exists in SM12x code only (its plans run the emulated atom on other GPUs).
inline bool mx_atoms_run_here() { return code_cc() >= 89; }
#define MXMOE_SKIP_WITHOUT_MX_ATOMS()                                                                      \
  do {                                                                                                     \
    if (!::mxmoe::test::mx_atoms_run_here())                                                               \
      GTEST_SKIP() << "the MX atoms need sm_89 or newer code (FP8 mma.sync); this GPU runs sm_"          \
                   << ::mxmoe::test::code_cc() << " code";                                               \
  } while (0)

inline std::vector<uint16_t> random_hidden(int64_t tokens, int hidden, std::mt19937_64& rng) {
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<uint16_t> h(static_cast<size_t>(tokens * hidden));
  for (auto& x : h) x = float_to_bf16(dist(rng));
  return h;
}

inline std::vector<float> random_logits(int64_t tokens, int experts, std::mt19937_64& rng) {
  std::normal_distribution<float> dist(0.f, 2.f);
  std::vector<float> l(static_cast<size_t>(tokens * experts));
  for (auto& x : l) x = dist(rng);
  return l;
}

template <class T>
DeviceBuffer to_device(const std::vector<T>& v) {
  return DeviceBuffer(v.data(), v.size() * sizeof(T));
}

template <class T>
std::vector<T> to_host(const DeviceBuffer& b, size_t count) {
  std::vector<T> v(count);
  if (count) MXMOE_CUDA_CHECK(cudaMemcpy(v.data(), b.get(), count * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

struct ErrorStats {
  double rel = 0, max_abs = 0;
  int64_t nan_count = 0, worst = -1;
};

inline ErrorStats compare(const std::vector<uint16_t>& out, const std::vector<double>& ref) {
  ErrorStats s;
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double o = bf16_to_float(out[i]);
    if (!std::isfinite(o)) {
      ++s.nan_count;
      continue;
    }
    const double d = std::abs(o - ref[i]);
    num += d * d;
    den += ref[i] * ref[i];
    if (d > s.max_abs) {
      s.max_abs = d;
      s.worst = static_cast<int64_t>(i);
    }
  }
  s.rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return s;
}

// Options for a runner on a GPU backend (default: the GEMV family), MXMOE_BACKEND ignored; `plan`
// forces parts of the GPU plan (mxmoe/plan_override.hpp; empty: MXMOE_PLAN's value where it is set).
inline RunnerOptions gemv_options(int64_t max_tokens, Backend backend = Backend::Gemv, PlanOverride plan = {}) {
  RunnerOptions options;
  options.backend = backend;
  options.max_tokens = max_tokens;
  options.use_env = false;
  options.plan = std::move(plan);
  return options;
}

// Sets an environment variable for the lifetime of the object (the runner reads it when built). Plans
// are forced through RunnerOptions::plan; this is for the test of the environment reader itself.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { EXPECT_EQ(setenv(name, value, 1), 0); }
  ~ScopedEnv() { unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

// Runs a GPU runner on host inputs; the output is poisoned (bf16 NaN) before the launch, and the
// workspace is filled with `workspace_fill` bytes (a forward may assume nothing of it).
inline std::vector<uint16_t> run_on_gpu(const MoeRunner& runner, const std::vector<uint16_t>& hidden,
                                        const std::vector<float>& logits, int64_t tokens, int workspace_fill = 0xFF,
                                        cudaStream_t stream = nullptr) {
  const int h = runner.config().hidden;
  const DeviceBuffer d_hidden = to_device(hidden);
  const DeviceBuffer d_logits = to_device(logits);
  DeviceBuffer d_out(static_cast<size_t>(tokens * h) * 2);
  if (d_out.bytes()) MXMOE_CUDA_CHECK(cudaMemset(d_out.get(), 0xFF, d_out.bytes()));
  DeviceBuffer ws(std::max<size_t>(runner.workspace_bytes(), 1));
  MXMOE_CUDA_CHECK(cudaMemset(ws.get(), workspace_fill, ws.bytes()));
  MXMOE_CUDA_CHECK(cudaDeviceSynchronize());  // the poison is in place before another stream's kernels run
  runner.forward(d_hidden.get<uint16_t>(), d_logits.get<float>(), tokens, d_out.get<uint16_t>(), ws.get(), ws.bytes(),
                 stream);
  MXMOE_CUDA_CHECK(cudaDeviceSynchronize());
  if (stream != nullptr) MXMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  return to_host<uint16_t>(d_out, static_cast<size_t>(tokens * h));
}

// Lifts a few blocks' scales by 2^12 (bytes above 128) in both GEMMs: the kernels' general
// multiplier path.
inline void lift_some_scales(MoeLayerData& layer) {
  for (size_t i = 0; i < layer.w1_scales.size(); i += 37) layer.w1_scales[i] = static_cast<uint8_t>(layer.w1_scales[i] + 12);
  for (size_t i = 5; i < layer.w2_scales.size(); i += 41) layer.w2_scales[i] = static_cast<uint8_t>(layer.w2_scales[i] + 12);
}

// Routes every token to expert 3 % E (its logit far above the rest).
inline void route_every_token_to_one_expert(std::vector<float>& logits, int64_t tokens, int experts) {
  for (int64_t t = 0; t < tokens; ++t) logits[static_cast<size_t>(t * experts + 3 % experts)] += 100.f;
}

// The output of a forward captured in a CUDA graph and replayed three times (output poisoned first).
inline std::vector<uint16_t> run_graph_replay(const MoeRunner& runner, const std::vector<uint16_t>& hidden,
                                              const std::vector<float>& logits, int64_t tokens) {
  const size_t n = static_cast<size_t>(tokens * runner.config().hidden);
  const DeviceBuffer d_hidden = to_device(hidden), d_logits = to_device(logits);
  DeviceBuffer d_out(n * 2), ws(runner.workspace_bytes());
  MXMOE_CUDA_CHECK(cudaMemset(d_out.get(), 0xFF, d_out.bytes()));
  MXMOE_CUDA_CHECK(cudaMemset(ws.get(), 0xFF, ws.bytes()));
  cudaStream_t stream;
  MXMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  MXMOE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  runner.forward(d_hidden.get<uint16_t>(), d_logits.get<float>(), tokens, d_out.get<uint16_t>(), ws.get(), ws.bytes(),
                 stream);
  MXMOE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  MXMOE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 3; ++i) MXMOE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  MXMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  return to_host<uint16_t>(d_out, n);
}

}  // namespace mxmoe::test
