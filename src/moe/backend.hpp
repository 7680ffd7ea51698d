#pragma once
// The internal interface every backend implements; MoeRunner owns one.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "kernels/mma/mx_gemm.hpp"
#include "mxmoe/config.hpp"
#include "mxmoe/error.hpp"
#include "mxmoe/runner.hpp"
#include "mxmoe/weights.hpp"
#include "routing/routing.hpp"

namespace mxmoe {

class BackendImpl {
 public:
  virtual ~BackendImpl() = default;
  virtual size_t workspace_bytes(int64_t max_tokens) const = 0;
  // Arguments are validated by MoeRunner before this is called (the host-side checks; each backend
  // checks where its pointers live). `route`: the router logits or the engine's ids and weights.
  // `stages` < kAllStages runs only the first stages (route, gemm1, gemm2, combine): for the per-stage
  // timing of `mxmoe bench --stages`.
  virtual void forward(const uint16_t* hidden, const routing::RouteSource& route, int64_t tokens, uint16_t* out,
                       void* workspace, cudaStream_t stream, int stages) const = 0;
  // The same, routed by the logits.
  void forward(const uint16_t* hidden, const float* router_logits, int64_t tokens, uint16_t* out, void* workspace,
               cudaStream_t stream, int stages) const {
    routing::RouteSource route;
    route.logits = router_logits;
    forward(hidden, route, tokens, out, workspace, stream, stages);
  }
  // MoeRunner::forward_f32: the output as fp32 sums before the bf16 rounding (GPU backends).
  virtual void forward_f32(const uint16_t* hidden, const routing::RouteSource& route, int64_t tokens, float* out,
                           void* workspace, cudaStream_t stream) const;
  virtual std::string describe_plan(int64_t tokens) const = 0;
};

inline void BackendImpl::forward_f32(const uint16_t*, const routing::RouteSource&, int64_t, float*, void*,
                                     cudaStream_t) const {
  detail::throw_error("out (fp32, forward_f32): only the GPU backends write an fp32 output");
}

// The CPU reference; `numerics`: the quantisation of the runner's precision (MoeRunner::reference_numerics).
std::unique_ptr<BackendImpl> make_reference_backend(const MoeConfig& config, const MoeWeights& weights,
                                                    const ReferenceOptions& numerics = {});
// GPU backends (src/moe/gpu_backend.cpp): uploads the weights in the layout the kernels stream, and
// plans for this device with the options' plan override, tune table and plan log. `mx_atom`, where
// set, is the atom an MX plan runs (the self-test's; mx_self_test.hpp), in place of the planner's.
std::unique_ptr<BackendImpl> make_gpu_backend(Backend backend, const MoeConfig& config, const MoeWeights& weights,
                                              const RunnerOptions& options,
                                              std::optional<mma::MxAtom> mx_atom = std::nullopt);

}  // namespace mxmoe
