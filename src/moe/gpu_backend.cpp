// GPU backends: weight upload (repacked for the kernel family), workspace layout, launch sequence.
// forward() is CUDA-graph safe: launches only, no allocation, no synchronisation, no device reads.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <span>
#include <sstream>
#include <vector>

#include "kernels/gemv/gemv.hpp"
#include "kernels/gemv/gemv_layout.hpp"
#include "moe/backend.hpp"
#include "moe/device_buffer.hpp"
#include "moe/workspace.hpp"
#include "mxmoe/error.hpp"
#include "routing/routing.hpp"

namespace mxmoe {
namespace {

// One GEMM's weights in the GEMV layout on the device.
struct PackedMatrix {
  gemv::PackedShape shape;
  DeviceBuffer packed, bias;
  bool wide_scales = false;
  int stages = gemv::kDefaultStages;  // weight ring stages
};

PackedMatrix upload(std::span<const uint8_t> blocks, std::span<const uint8_t> scales, std::span<const uint16_t> bias,
                    int experts, int64_t rows, int64_t k, bool swiglu_pairs) {
  PackedMatrix m;
  m.shape = gemv::packed_shape(rows, k / 32);
  m.wide_scales = gemv::needs_wide_scales(scales.data(), static_cast<int64_t>(scales.size()));
  const auto stride = static_cast<size_t>(m.shape.bytes());
  std::vector<uint8_t> packed(stride * experts);
  const auto src_w = static_cast<size_t>(rows * k / 2), src_s = static_cast<size_t>(rows * k / 32);
  for (int e = 0; e < experts; ++e)
    gemv::pack_expert(blocks.data() + e * src_w, scales.data() + e * src_s, m.shape, swiglu_pairs,
                      packed.data() + e * stride);
  m.packed = DeviceBuffer(packed.data(), packed.size());
  if (!bias.empty()) m.bias = DeviceBuffer(bias.data(), bias.size_bytes());
  return m;
}

// An integer tuning knob from the environment: 0 when unset or empty, else one of `allowed`
// (anything else is an Error naming the variable and the allowed values).
int env_choice(const char* name, std::initializer_list<int> allowed) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return 0;
  std::string valid;
  for (const int v : allowed) {
    if (std::to_string(v) == env) return v;
    valid += (valid.empty() ? "" : ", ") + std::to_string(v);
  }
  detail::throw_error(name, ": expected one of ", valid, ", got '", env, "'");
}

void require_device_pointer(const void* p, const char* name, size_t alignment) {
  cudaPointerAttributes attr{};
  MXMOE_CUDA_CHECK(cudaPointerGetAttributes(&attr, p));
  MXMOE_REQUIRE(attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged, name,
                ": expected a CUDA device pointer (GPU backend), got a host pointer");
  MXMOE_REQUIRE(reinterpret_cast<uintptr_t>(p) % alignment == 0, name, ": must be ", alignment, "-byte aligned");
}

class GemvBackend final : public BackendImpl {
 public:
  GemvBackend(const MoeConfig& config, const MoeWeights& weights) : config_(config) {
    int device = 0;
    MXMOE_CUDA_CHECK(cudaGetDevice(&device));
    int smem_optin = 0;
    MXMOE_CUDA_CHECK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    const size_t static_smem = gemv::static_smem_bytes();
    const int k_max = gemv::max_k(static_cast<size_t>(smem_optin), static_smem);
    MXMOE_REQUIRE(config.hidden <= k_max, "hidden: ", config.hidden, " is above the GEMV family's limit of ", k_max,
                  " on this device");
    MXMOE_REQUIRE(config.intermediate <= k_max, "intermediate: ", config.intermediate,
                  " is above the GEMV family's limit of ", k_max, " on this device");
    const int64_t h = config.hidden, i = config.intermediate;
    // Tuning and testing knob: force the ring depth (the default is gemv::kDefaultStages). Checked
    // before the upload, so a refused depth costs no repacking.
    int stages = gemv::kDefaultStages;
    if (const int forced = env_choice("MXMOE_GEMV_STAGES", {2, 3})) {
      for (const int64_t k : {h, i})
        MXMOE_REQUIRE(gemv::stages_fit(static_cast<int>(k), forced, static_cast<size_t>(smem_optin), static_smem),
                      "MXMOE_GEMV_STAGES: ", forced, " stages do not fit this device's shared memory at K = ", k);
      stages = forced;
    }
    w1_ = upload(weights.w1_blocks, weights.w1_scales, weights.w1_bias, config.num_experts, 2 * i, h, true);
    w2_ = upload(weights.w2_blocks, weights.w2_scales, weights.w2_bias, config.num_experts, h, i, false);
    w1_.stages = w2_.stages = stages;
    MXMOE_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device));
    // Tuning knob: force the GEMV split-K instead of the cost model's choice (0: not set).
    ksplit_override_ = env_choice("MXMOE_GEMV_KSPLIT", {1, 2, 4, 8});
    gemv::configure(static_cast<size_t>(smem_optin));
    device_ = device;
  }

  size_t workspace_bytes(int64_t max_tokens) const override { return WorkspaceLayout(config_, max_tokens).total; }

  void forward(const uint16_t* hidden, const float* router_logits, int64_t tokens, uint16_t* out, void* workspace,
               cudaStream_t stream, int stages) const override {
    int current = 0;
    MXMOE_CUDA_CHECK(cudaGetDevice(&current));
    MXMOE_REQUIRE(current == device_, "forward: the current CUDA device is ", current,
                  ", but this runner's weights live on device ", device_);
    require_device_pointer(hidden, "hidden", 16);
    require_device_pointer(router_logits, "router_logits", 4);
    require_device_pointer(out, "out", 8);
    require_device_pointer(workspace, "workspace", 256);
    const WorkspaceLayout layout(config_, tokens);
    const auto ws = layout.bind(workspace);
    routing::route_and_permute(config_, router_logits, tokens, ws.routing, stream);
    if (stages < 2) return;

    const int max_active = static_cast<int>(std::min<int64_t>(config_.num_experts, tokens * config_.top_k));
    gemv::GemvArgs a;
    a.row_pair = ws.routing.row_pair;
    a.top_k = config_.top_k;
    a.expert_offsets = ws.routing.expert_offsets;
    a.active_experts = ws.routing.active_experts;
    a.active_count = ws.routing.active_count;
    a.pair_weights = ws.routing.pair_weights;
    a.alpha = config_.swiglu_alpha;
    a.limit = config_.swiglu_limit;
    a.sm_count = sm_count_;
    a.ksplit_override = ksplit_override_;

    bind(a, w1_, static_cast<int>(2 * config_.intermediate), config_.hidden);
    a.act = hidden;
    a.out = ws.intermediate;
    a.logits = router_logits;
    a.experts = config_.num_experts;
    gemv::launch_gemm1(a, tokens, max_active, stream);
    a.logits = nullptr;
    if (stages < 3) return;

    bind(a, w2_, config_.hidden, config_.intermediate);
    a.act = ws.intermediate;
    a.out = ws.expert_rows;
    gemv::launch_gemm2(a, tokens, max_active, stream);
    if (stages < 4) return;

    routing::combine_rows(ws.expert_rows, ws.routing.pair_row, tokens, config_.top_k, config_.hidden, out, stream);
  }

  std::string describe_plan(int64_t tokens) const override {
    const int max_active = static_cast<int>(std::min<int64_t>(config_.num_experts, tokens * config_.top_k));
    gemv::GemvArgs a;
    a.sm_count = sm_count_;
    a.ksplit_override = ksplit_override_;
    std::ostringstream os;
    bind(a, w1_, static_cast<int>(2 * config_.intermediate), config_.hidden);
    os << "gemv 16x8 tiles, gemm1 ksplit " << gemv::ksplit_for(a, max_active);
    bind(a, w2_, config_.hidden, config_.intermediate);
    os << ", gemm2 ksplit " << gemv::ksplit_for(a, max_active) << ", " << max_active << " expert slots";
    if (w1_.stages != gemv::kDefaultStages || w2_.stages != gemv::kDefaultStages)
      os << ", ring stages " << w1_.stages << "/" << w2_.stages;
    return os.str();
  }

 private:
  static void bind(gemv::GemvArgs& a, const PackedMatrix& m, int n, int k) {
    a.weights = m.packed.get<uint8_t>();
    a.expert_stride = m.shape.bytes();
    a.bias = m.bias.get<uint16_t>();
    a.n = n;
    a.k = k;
    a.chunks = static_cast<int>(m.shape.chunks);
    a.tiles = static_cast<int>(m.shape.tiles);
    a.wide_scales = m.wide_scales;
    a.stages = m.stages;
  }

  MoeConfig config_;
  PackedMatrix w1_, w2_;
  int sm_count_ = 0;
  int device_ = 0;
  int ksplit_override_ = 0;
};

}  // namespace

std::unique_ptr<BackendImpl> make_gpu_backend(Backend backend, const MoeConfig& config, const MoeWeights& weights) {
  switch (backend) {
    case Backend::Gemv:
      return std::make_unique<GemvBackend>(config, weights);
    default:
      detail::throw_error("backend: '", to_string(backend), "' is not a GPU backend of this build");
  }
}

}  // namespace mxmoe
