// Backend::Reference: the CPU reference behind the runner interface (host pointers).
#include <cuda_runtime.h>

#include <span>
#include <vector>

#include "moe/backend.hpp"
#include "mxmoe/error.hpp"
#include "mxmoe/reference.hpp"
#include "reference/routed_reference.hpp"

namespace mxmoe {
namespace {

// The reference reads its inputs on the host: a device pointer (say, after MXMOE_BACKEND=reference
// was set under a program written for a GPU backend) is an error, not a segfault.
void require_host_pointer(const void* p, const char* name) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();  // no driver or an unknown pointer: a plain host pointer
    return;
  }
  MXMOE_REQUIRE(attr.type != cudaMemoryTypeDevice, name,
                ": the reference backend runs on the CPU and needs a host pointer, got a device pointer");
}

class ReferenceBackend final : public BackendImpl {
 public:
  ReferenceBackend(const MoeConfig& config, const MoeWeights& weights, const ReferenceOptions& numerics)
      : config_(config), numerics_(numerics) {
    // The runner must not depend on the caller keeping the weights alive.
    data_.w1_blocks.assign(weights.w1_blocks.begin(), weights.w1_blocks.end());
    data_.w1_scales.assign(weights.w1_scales.begin(), weights.w1_scales.end());
    data_.w1_bias.assign(weights.w1_bias.begin(), weights.w1_bias.end());
    data_.w2_blocks.assign(weights.w2_blocks.begin(), weights.w2_blocks.end());
    data_.w2_scales.assign(weights.w2_scales.begin(), weights.w2_scales.end());
    data_.w2_bias.assign(weights.w2_bias.begin(), weights.w2_bias.end());
  }

  size_t workspace_bytes(int64_t) const override { return 0; }

  using BackendImpl::forward;
  void forward(const uint16_t* hidden, const routing::RouteSource& route, int64_t tokens, uint16_t* out, void*,
               cudaStream_t, int) const override {
    require_host_pointer(hidden, "hidden");
    require_host_pointer(out, "out");
    const auto t = static_cast<size_t>(tokens);
    const auto h = static_cast<size_t>(config_.hidden);
    const std::span<const uint16_t> x(hidden, t * h);
    if (!route.routed()) {
      require_host_pointer(route.logits, "router_logits");
      const auto e = static_cast<size_t>(config_.num_experts);
      reference_moe(config_, data_.view(), x, std::span(route.logits, t * e), tokens, std::span(out, t * h), numerics_);
      return;
    }
    // The engine's routing, checked in full (host data): an Error names topk_ids or topk_weights.
    require_host_pointer(route.topk_ids, "topk_ids");
    require_host_pointer(route.topk_weights, "topk_weights");
    const size_t pairs = t * static_cast<size_t>(config_.top_k);
    std::vector<int32_t> narrowed;
    if (route.ids64)
      narrowed = narrow_routed_ids(std::span(static_cast<const int64_t*>(route.topk_ids), pairs), config_.top_k,
                                   config_.num_experts);
    const std::span<const int32_t> ids =
        route.ids64 ? std::span<const int32_t>(narrowed) : std::span(static_cast<const int32_t*>(route.topk_ids), pairs);
    reference_moe_routed(config_, data_.view(), x, ids, std::span(route.topk_weights, pairs), tokens,
                         std::span(out, t * h), numerics_);
  }

  std::string describe_plan(int64_t) const override { return "reference (CPU, fp64 accumulation)"; }

 private:
  MoeConfig config_;
  ReferenceOptions numerics_;  // the runner's precision (fp8: the W4A8 numerics)
  MoeLayerData data_;
};

}  // namespace

std::unique_ptr<BackendImpl> make_reference_backend(const MoeConfig& config, const MoeWeights& weights,
                                                    const ReferenceOptions& numerics) {
  return std::make_unique<ReferenceBackend>(config, weights, numerics);
}

}  // namespace mxmoe
