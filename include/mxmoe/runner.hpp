#pragma once
// MoeRunner: one MoE layer, ready to run. The backend (CPU reference, or a GPU kernel family) is
// chosen by RunnerOptions or the MXMOE_BACKEND environment variable; the planner inside picks
// tiles per call. GPU forwards are CUDA-graph safe: no allocation, no synchronisation, no host
// read of device data.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mxmoe/config.hpp"
#include "mxmoe/plan_override.hpp"
#include "mxmoe/reference.hpp"
#include "mxmoe/weights.hpp"

struct CUstream_st;
using cudaStream_t = CUstream_st*;

namespace mxmoe {

enum class Backend {
  Auto,       // the best for the machine: on a GPU the planner picks a kernel family per forward
              // (GEMV for few rows per expert, the tensor-core family above); without one, Reference
  Reference,  // the CPU reference (host pointers)
  Gemv,       // GPU: W4A16 grouped GEMV family at every batch (decode-sized batches; any batch works)
  Mma,        // GPU: W4A16 tensor-core grouped GEMM family (Bf16Atom) at every batch
  MxEmulated, // GPU, SM89/SM90: MXFP8 activations x MXFP4 weights through the emulated MX atom (the
              // SM120 block-scaled data path, run on Hopper); speed reported, not targeted
  Mx,         // GPU, SM120/SM121 (sm_120a/sm_121a builds): the native block-scaled MMA. Never run:
              // no such GPU was available (README)
};

// The activations' precision in the tensor-core GEMMs (the weights are MXFP4 either way).
enum class Precision {
  Bf16,  // bf16 activations, weights decoded exactly (W4A16): the default, at every batch size
  Fp8,   // e4m3 activations. Hopper: the W4A8 wgmma family (one scale per token for GEMM1, a static one
         // from the clamped SwiGLU's bound for GEMM2: needs swiglu_alpha > 0; weights as e4m3 at a
         // per-row exponent; docs/fp8.md), at every batch size; SM120/SM121: the MXFP8 block-scaled path
         // (backend mx); the CPU reference: the W4A8 numerics. About 4% error against fp64 where bf16 has
         // 0.2-0.3%: a choice by name, never auto's
};

std::string to_string(Backend backend);
std::string to_string(Precision precision);
// "bf16" or "fp8" (case-insensitive); others throw an Error naming `precision`.
Precision parse_precision(std::string_view name);
// Case-insensitive ("auto", "reference", "gemv", "mma", "mx-emulated", "mx"); unknown names throw an
// Error listing valid ones.
Backend parse_backend(std::string_view name);
std::vector<std::string> backend_names();
// Whether the backend runs on the GPU (its forward takes device pointers).
bool backend_on_gpu(Backend backend);
// Whether the backend quantises the activations to MXFP8 (RCEIL) before each GEMM: its results are
// held against a reference that does the same (ReferenceOptions).
bool backend_uses_mxfp8(Backend backend);

struct RunnerOptions {
  Backend backend = Backend::Auto;
  int64_t max_tokens = 4096;  // the workspace is sized for at most this many tokens per forward
  bool use_env = true;        // let MXMOE_BACKEND override `backend`
  // Forces parts of the GPU plan (plan_override.hpp); when empty, MXMOE_PLAN's value.
  PlanOverride plan;
  // A `mxmoe bench --tune` table for this device and shape; when empty, MXMOE_TUNE_FILE's value. A
  // table for another device or shape is ignored, a missing or malformed file is an Error.
  std::string tune_file;
  // Print each forward's plan to stderr; also on with MXMOE_LOG=plan.
  bool log_plan = false;
  // Plan for a named target (h100, h200, rtx5090, rtxpro6000, gb10) instead of the device at hand, and
  // run that plan here: on a Hopper GPU an SM120/SM121 target's plan runs with the emulated MX atom in
  // place of the native one, and its kernels may be confined to the target's SM count by running them
  // in a GreenContext's stream (moe/green_context.hpp; `mxmoe bench --target` does).
  std::string target;
  // A 0xFF (NaN) weight scale byte: an Error naming the tensor and block (default; a gpt-oss
  // checkpoint has none, so one means corruption), or, when allowed, the MX semantics: that block's
  // outputs are NaN.
  bool allow_nan_scales = false;
  // The activations' precision (Precision). fp8 needs backend auto (or mx, mx-emulated, reference):
  // the gemv and mma backends are W4A16 only.
  Precision precision = Precision::Bf16;
  // The experts the tokens are routed among when this layer holds only config.num_experts of them (an
  // expert-parallel rank: the others' pairs arrive as kDroppedPairId). The planner then expects
  // T * k * num_experts / routed_experts of the pairs and picks tiles for those rows; the workspace and
  // grids still cover all T * k. 0: config.num_experts. ShardedMoe sets it for its expert-parallel ranks.
  int routed_experts = 0;
};

class BackendImpl;

class MoeRunner {
 public:
  // Validates config and weights; a GPU backend uploads (and may repack) the weights here.
  MoeRunner(const MoeConfig& config, const MoeWeights& weights, const RunnerOptions& options = {});
  ~MoeRunner();
  MoeRunner(MoeRunner&&) noexcept;
  MoeRunner& operator=(MoeRunner&&) noexcept;

  const MoeConfig& config() const { return config_; }
  Backend backend() const { return backend_; }
  // The activations' precision the forward runs at (RunnerOptions::precision; bf16 where the MX
  // self-test sent an fp8 runner back to W4A16), and the quantisation a reference must apply to give
  // the same numerics (MXFP8 for the mx backends, W4A8 for fp8 on Hopper and the reference, none for bf16).
  Precision precision() const { return precision_; }
  ReferenceOptions reference_numerics() const;
  bool on_gpu() const { return backend_on_gpu(backend_); }
  int64_t max_tokens() const { return max_tokens_; }
  // Bytes of workspace forward() needs (device memory for GPU backends, 0 for Reference).
  size_t workspace_bytes() const;
  // hidden [T, H] bf16, router_logits [T, E] fp32, out [T, H] bf16: host pointers for Reference,
  // device pointers otherwise. T may be 0. Throws on T > max_tokens(), null pointers, or a
  // workspace smaller than workspace_bytes(). On a GPU, hidden and router_logits must be complete
  // when forward is enqueued: the first kernels read them before waiting for the previous work in
  // the stream, so their producer must be an ordinary kernel, a copy or the host, not a kernel that
  // releases its dependants early (programmatic dependent launch; docs/gpu-pipeline.md).
  void forward(const uint16_t* hidden, const float* router_logits, int64_t tokens, uint16_t* out,
               void* workspace, size_t workspace_size, cudaStream_t stream = nullptr) const;
  // The same layer routed by the engine: topk_ids [T, k] (int32 or int64) and topk_weights [T, k] fp32
  // in place of the logits, k = config().top_k. Slot s of a token is summed in slot order as the
  // logits route's slot s is, and the weights are used as given: no softmax, no renormalisation. Given
  // the ids and weights the logits route computes, the output has forward()'s bits on every backend.
  // A token's k ids must be distinct experts in [0, E) or kDroppedPairId (-1: the pair is dropped and
  // adds nothing, as vLLM marks another rank's expert; a token with every pair dropped gets zeros), and
  // weights finite and >= 0 (top-k probabilities; a dropped pair's is not read). The reference backend checks both (an Error naming topk_ids or topk_weights); a
  // GPU backend checks pointers, alignment and sizes on the host but cannot read the ids there (forward
  // reads no device memory on the host), so on the device a token whose ids are not k distinct experts in
  // range gets a NaN output row (never an out-of-bounds access; common/routed_pairs.cuh), and weights
  // are used as they are. The same ordering rule as forward()'s holds for topk_ids and topk_weights.
  void forward_routed(const uint16_t* hidden, const int32_t* topk_ids, const float* topk_weights, int64_t tokens,
                      uint16_t* out, void* workspace, size_t workspace_size, cudaStream_t stream = nullptr) const;
  void forward_routed(const uint16_t* hidden, const int64_t* topk_ids, const float* topk_weights, int64_t tokens,
                      uint16_t* out, void* workspace, size_t workspace_size, cudaStream_t stream = nullptr) const;
  // The output as fp32 sums, before forward()'s bf16 rounding (out [T, H] fp32, 16-byte aligned), GPU
  // backends only (the reference backend throws): a shard's partial output that is summed over the ranks
  // in fp32, so that the layer's output rounds once (ShardedMoe). The combine runs as its own kernel.
  // Rounded to bf16 (nearest even), it is forward()'s output.
  void forward_f32(const uint16_t* hidden, const float* router_logits, int64_t tokens, float* out, void* workspace,
                   size_t workspace_size, cudaStream_t stream = nullptr) const;
  void forward_routed_f32(const uint16_t* hidden, const int32_t* topk_ids, const float* topk_weights, int64_t tokens,
                          float* out, void* workspace, size_t workspace_size, cudaStream_t stream = nullptr) const;
  void forward_routed_f32(const uint16_t* hidden, const int64_t* topk_ids, const float* topk_weights, int64_t tokens,
                          float* out, void* workspace, size_t workspace_size, cudaStream_t stream = nullptr) const;
  // Profiling: run only the first `stages` of route, gemm1, gemm2, combine (kAllStages = all; the
  // output is complete only then). `mxmoe bench --stages` times the differences.
  static constexpr int kAllStages = 4;
  void forward_stages(const uint16_t* hidden, const float* router_logits, int64_t tokens, uint16_t* out,
                      void* workspace, size_t workspace_size, cudaStream_t stream, int stages) const;
  // The plan forward() would use for T tokens (backend, kernels, tiles), for logs and `mxmoe bench`.
  std::string describe_plan(int64_t tokens) const;

 private:
  const BackendImpl& impl() const;
  // The checks every forward shares (tokens, workspace, hidden and out); false: nothing to run (T = 0).
  bool check_forward(const uint16_t* hidden, int64_t tokens, const uint16_t* out, const void* workspace,
                     size_t workspace_size) const;
  void forward_routed_ids(const uint16_t* hidden, const void* topk_ids, bool ids64, const float* topk_weights,
                          int64_t tokens, uint16_t* out, void* workspace, size_t workspace_size,
                          cudaStream_t stream) const;
  // forward_f32 and forward_routed_f32: logits, or ids (ids64) and weights.
  void forward_f32_any(const uint16_t* hidden, const float* logits, const void* topk_ids, bool ids64,
                       const float* topk_weights, int64_t tokens, float* out, void* workspace, size_t workspace_size,
                       cudaStream_t stream) const;

  MoeConfig config_;
  Backend backend_;
  Precision precision_ = Precision::Bf16;
  int64_t max_tokens_;
  std::unique_ptr<BackendImpl> impl_;
};

// MXMOE_BACKEND, parsed (case-insensitive); nullopt when unset or empty. An unknown name throws an
// Error naming MXMOE_BACKEND and listing the valid backends.
std::optional<Backend> backend_from_env();
// The options with the environment applied, the one place that reads it: MXMOE_BACKEND (when
// use_env), MXMOE_PLAN and MXMOE_TUNE_FILE (where the options leave them empty), MXMOE_LOG=plan. A
// bad value is an Error naming the variable.
RunnerOptions with_environment(RunnerOptions options);

// Resolves Auto (and MXMOE_BACKEND when use_env) to a concrete backend for this machine.
Backend resolve_backend(const RunnerOptions& options);

}  // namespace mxmoe
