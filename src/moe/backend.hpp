#pragma once
// The internal interface every backend implements; MoeRunner owns one.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "mxmoe/config.hpp"
#include "mxmoe/runner.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe {

class BackendImpl {
 public:
  virtual ~BackendImpl() = default;
  virtual size_t workspace_bytes(int64_t max_tokens) const = 0;
  // Arguments are validated by MoeRunner before this is called. `stages` < kAllStages runs only the
  // first stages (route, gemm1, gemm2, combine): for the per-stage timing of `mxmoe bench --stages`.
  virtual void forward(const uint16_t* hidden, const float* router_logits, int64_t tokens, uint16_t* out,
                       void* workspace, cudaStream_t stream, int stages) const = 0;
  virtual std::string describe_plan(int64_t tokens) const = 0;
};

std::unique_ptr<BackendImpl> make_reference_backend(const MoeConfig& config, const MoeWeights& weights);
// GPU backends (src/moe/gpu_backend.cpp): uploads the weights in the layout the kernels stream, and
// plans for this device with the options' plan override, tune table and plan log.
std::unique_ptr<BackendImpl> make_gpu_backend(Backend backend, const MoeConfig& config, const MoeWeights& weights,
                                              const RunnerOptions& options);

}  // namespace mxmoe
