// MoeRunner: validation of every argument, then dispatch to the backend.
#include "mxmoe/runner.hpp"

#include <algorithm>
#include <span>
#include <string>

#include "moe/backend.hpp"
#include "moe/mx_self_test.hpp"
#include "mxmoe/error.hpp"
#include "reference/fp8_model.hpp"

namespace mxmoe {
namespace {

// The first 0xFF byte of scales [E, rows, blocks] as an Error naming it.
void reject_nan_scales(std::span<const uint8_t> scales, const char* name, int64_t rows, int64_t blocks) {
  const auto it = std::find(scales.begin(), scales.end(), uint8_t{0xFF});
  if (it == scales.end()) return;
  const int64_t i = it - scales.begin();
  throw Error(std::string(name) + ": scale byte 0xFF (NaN) at expert " + std::to_string(i / (rows * blocks)) +
              ", row " + std::to_string(i / blocks % rows) + ", block " + std::to_string(i % blocks) +
              "; MXFP4 weights of a gpt-oss layer are never NaN (RunnerOptions::allow_nan_scales keeps MX semantics)");
}

}  // namespace

MoeRunner::MoeRunner(const MoeConfig& config, const MoeWeights& weights, const RunnerOptions& options)
    : config_(config), backend_(Backend::Reference), max_tokens_(options.max_tokens) {
  config_.validate();
  weights.validate(config_);
  if (!options.allow_nan_scales) {
    reject_nan_scales(weights.w1_scales, "w1_scales", 2 * config_.intermediate, config_.hidden / 32);
    reject_nan_scales(weights.w2_scales, "w2_scales", config_.hidden, config_.intermediate / 32);
  }
  MXMOE_REQUIRE(options.max_tokens >= 0 && options.max_tokens <= (int64_t{1} << 24),
                "max_tokens: expected 0..16777216, got ", options.max_tokens);
  MXMOE_REQUIRE(options.routed_experts == 0 || options.routed_experts >= config.num_experts,
                "routed_experts: expected 0 or at least the layer's ", config.num_experts, " experts, got ",
                options.routed_experts);
  RunnerOptions resolved = with_environment(options);
  // An MX backend runs only where its atom passed the self-test on this GPU (mx_self_test.hpp); an fp8
  // runner sent back to W4A16 so runs at bf16.
  const Backend chosen = resolve_backend(resolved);
  backend_ = gate_mx_backend(chosen, resolved);
  if (backend_ != chosen) resolved.precision = Precision::Bf16;
  precision_ = resolved.precision;
  // W4A8 (Hopper's fp8 and the reference's): GEMM2's e4m3 input is scaled by the SwiGLU's bound.
  if (precision_ == Precision::Fp8 && !backend_uses_mxfp8(backend_))
    fp8::require_gemm2_input_scale(config_.swiglu_alpha, config_.swiglu_limit, "precision: fp8");
  impl_ = backend_ == Backend::Reference ? make_reference_backend(config_, weights, reference_numerics())
                                         : make_gpu_backend(backend_, config_, weights, resolved);
}

ReferenceOptions MoeRunner::reference_numerics() const {
  ReferenceOptions o;
  if (backend_uses_mxfp8(backend_)) o.mxfp8_gemm1_input = o.mxfp8_gemm2_input = true;
  else if (precision_ == Precision::Fp8) o.fp8_weights = o.fp8_gemm1_input = o.fp8_gemm2_input = true;
  return o;
}

MoeRunner::~MoeRunner() = default;
MoeRunner::MoeRunner(MoeRunner&&) noexcept = default;
MoeRunner& MoeRunner::operator=(MoeRunner&&) noexcept = default;

// A moved-from runner has no backend: calls on it are errors, never a null dereference.
const BackendImpl& MoeRunner::impl() const {
  MXMOE_REQUIRE(impl_ != nullptr, "MoeRunner: this runner was moved from and has no backend");
  return *impl_;
}

size_t MoeRunner::workspace_bytes() const { return impl().workspace_bytes(max_tokens_); }

void MoeRunner::forward(const uint16_t* hidden, const float* router_logits, int64_t tokens, uint16_t* out,
                        void* workspace, size_t workspace_size, cudaStream_t stream) const {
  forward_stages(hidden, router_logits, tokens, out, workspace, workspace_size, stream, kAllStages);
}

bool MoeRunner::check_forward(const uint16_t* hidden, int64_t tokens, const uint16_t* out, const void* workspace,
                              size_t workspace_size) const {
  MXMOE_REQUIRE(tokens >= 0, "tokens: expected >= 0, got ", tokens);
  MXMOE_REQUIRE(tokens <= max_tokens_, "tokens: ", tokens, " is above the runner's max_tokens (", max_tokens_,
                "); build the runner with a larger RunnerOptions::max_tokens");
  const size_t need = workspace_bytes();
  MXMOE_REQUIRE(workspace_size >= need, "workspace: ", workspace_size, " bytes given, ", need, " needed");
  MXMOE_REQUIRE(need == 0 || workspace != nullptr, "workspace: null pointer");
  if (tokens == 0) return false;
  MXMOE_REQUIRE(hidden != nullptr, "hidden: null pointer");
  MXMOE_REQUIRE(out != nullptr, "out: null pointer");
  return true;
}

void MoeRunner::forward_stages(const uint16_t* hidden, const float* router_logits, int64_t tokens, uint16_t* out,
                               void* workspace, size_t workspace_size, cudaStream_t stream, int stages) const {
  MXMOE_REQUIRE(stages >= 1 && stages <= kAllStages, "stages: expected 1..", kAllStages, ", got ", stages);
  if (!check_forward(hidden, tokens, out, workspace, workspace_size)) return;
  MXMOE_REQUIRE(router_logits != nullptr, "router_logits: null pointer");
  impl().forward(hidden, router_logits, tokens, out, workspace, stream, stages);
}

void MoeRunner::forward_routed(const uint16_t* hidden, const int32_t* topk_ids, const float* topk_weights,
                               int64_t tokens, uint16_t* out, void* workspace, size_t workspace_size,
                               cudaStream_t stream) const {
  forward_routed_ids(hidden, topk_ids, false, topk_weights, tokens, out, workspace, workspace_size, stream);
}

void MoeRunner::forward_routed(const uint16_t* hidden, const int64_t* topk_ids, const float* topk_weights,
                               int64_t tokens, uint16_t* out, void* workspace, size_t workspace_size,
                               cudaStream_t stream) const {
  forward_routed_ids(hidden, topk_ids, true, topk_weights, tokens, out, workspace, workspace_size, stream);
}

void MoeRunner::forward_routed_ids(const uint16_t* hidden, const void* topk_ids, bool ids64,
                                   const float* topk_weights, int64_t tokens, uint16_t* out, void* workspace,
                                   size_t workspace_size, cudaStream_t stream) const {
  if (!check_forward(hidden, tokens, out, workspace, workspace_size)) return;
  MXMOE_REQUIRE(topk_ids != nullptr, "topk_ids: null pointer");
  MXMOE_REQUIRE(topk_weights != nullptr, "topk_weights: null pointer");
  routing::RouteSource route;
  route.topk_ids = topk_ids;
  route.ids64 = ids64;
  route.topk_weights = topk_weights;
  impl().forward(hidden, route, tokens, out, workspace, stream, kAllStages);
}

void MoeRunner::forward_f32(const uint16_t* hidden, const float* router_logits, int64_t tokens, float* out,
                            void* workspace, size_t workspace_size, cudaStream_t stream) const {
  MXMOE_REQUIRE(router_logits != nullptr || tokens == 0, "router_logits: null pointer");
  forward_f32_any(hidden, router_logits, nullptr, false, nullptr, tokens, out, workspace, workspace_size, stream);
}

void MoeRunner::forward_routed_f32(const uint16_t* hidden, const int32_t* topk_ids, const float* topk_weights,
                                   int64_t tokens, float* out, void* workspace, size_t workspace_size,
                                   cudaStream_t stream) const {
  forward_f32_any(hidden, nullptr, topk_ids, false, topk_weights, tokens, out, workspace, workspace_size, stream);
}

void MoeRunner::forward_routed_f32(const uint16_t* hidden, const int64_t* topk_ids, const float* topk_weights,
                                   int64_t tokens, float* out, void* workspace, size_t workspace_size,
                                   cudaStream_t stream) const {
  forward_f32_any(hidden, nullptr, topk_ids, true, topk_weights, tokens, out, workspace, workspace_size, stream);
}

void MoeRunner::forward_f32_any(const uint16_t* hidden, const float* logits, const void* topk_ids, bool ids64,
                                const float* topk_weights, int64_t tokens, float* out, void* workspace,
                                size_t workspace_size, cudaStream_t stream) const {
  // check_forward checks the out pointer for null only.
  if (!check_forward(hidden, tokens, reinterpret_cast<const uint16_t*>(out), workspace, workspace_size)) return;
  routing::RouteSource route;
  if (logits != nullptr) {
    route.logits = logits;
  } else {
    MXMOE_REQUIRE(topk_ids != nullptr, "topk_ids: null pointer");
    MXMOE_REQUIRE(topk_weights != nullptr, "topk_weights: null pointer");
    route.topk_ids = topk_ids;
    route.ids64 = ids64;
    route.topk_weights = topk_weights;
  }
  impl().forward_f32(hidden, route, tokens, out, workspace, stream);
}

std::string MoeRunner::describe_plan(int64_t tokens) const {
  MXMOE_REQUIRE(tokens >= 0 && tokens <= max_tokens_, "tokens: expected 0..", max_tokens_, ", got ", tokens);
  return impl().describe_plan(tokens);
}

}  // namespace mxmoe
