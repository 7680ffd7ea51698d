#pragma once
// The extension's checks of DLPack tensors at the boundary (dtype, shape, contiguity, device) and the
// reading of a layer's checkpoint-layout weight tensors: shared by Layer (module.cpp) and ShardedLayer
// (sharded_layer.hpp). Errors name the argument.
#include <cuda_runtime.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/cuda_check.hpp"
#include "mxmoe/mxmoe.hpp"

namespace mxmoe::python {

namespace nb = nanobind;

// Any layout is accepted at the boundary (no implicit copies: a copied `out` would never be written
// back), then checked: every tensor must be C-contiguous. Inputs may be read-only (InArray); `out`
// must be writable (Array).
using Array = nb::ndarray<>;
using InArray = nb::ndarray<nb::ro>;

// What to pass for a bf16 tensor, in every dtype error that asks for one.
inline constexpr const char* kBf16 =
    "bfloat16 (a torch or JAX bfloat16 tensor, an ml_dtypes.bfloat16 NumPy array, or the bf16 bit patterns as "
    "uint16, e.g. from NumPy or CuPy)";

template <class A>
void require_contiguous(const A& a, const char* name) {
  if (a.size() == 0) return;  // no elements: any strides describe it
  // An output is written in place: a contiguous copy of it would never be read back.
  const char* hint = std::string_view(name) == "out"
                         ? "pass a contiguous output tensor (or leave out=None)"
                         : "pass a contiguous one (e.g. tensor.contiguous(), numpy.ascontiguousarray)";
  int64_t expected = 1;
  for (size_t i = a.ndim(); i-- > 0;) {
    MXMOE_REQUIRE(a.shape(i) <= 1 || a.stride(i) == expected, name, ": must be C-contiguous (dense, row-major); ",
                  hint);
    expected *= static_cast<int64_t>(a.shape(i));
  }
}

template <class A>
std::string dtype_text(const A& a) {
  const auto d = a.dtype();
  std::string kind;
  switch (static_cast<nb::dlpack::dtype_code>(d.code)) {
    case nb::dlpack::dtype_code::Int: kind = "int"; break;
    case nb::dlpack::dtype_code::UInt: kind = "uint"; break;
    case nb::dlpack::dtype_code::Float: kind = "float"; break;
    case nb::dlpack::dtype_code::Bfloat: kind = "bfloat"; break;
    case nb::dlpack::dtype_code::Complex: kind = "complex"; break;
    case nb::dlpack::dtype_code::Bool: return "bool";
    default: return "DLPack dtype code " + std::to_string(d.code) + " (" + std::to_string(d.bits) + " bits)";
  }
  return kind + std::to_string(d.bits) + (d.lanes > 1 ? "x" + std::to_string(d.lanes) : "");
}

template <class A>
bool has_dtype(const A& a, nb::dlpack::dtype_code code, int bits) {
  const auto d = a.dtype();
  return d.bits == bits && d.lanes == 1 && d.code == static_cast<uint8_t>(code);
}
// 2-byte elements that carry bf16 bits: bfloat16 itself, or raw 16-bit integers.
template <class A>
bool is_bf16_like(const A& a) {
  return has_dtype(a, nb::dlpack::dtype_code::Bfloat, 16) || has_dtype(a, nb::dlpack::dtype_code::UInt, 16) ||
         has_dtype(a, nb::dlpack::dtype_code::Int, 16);
}
template <class A>
void require_dtype(bool ok, const A& a, const char* name, const char* expected) {
  MXMOE_REQUIRE(ok, name, ": expected ", expected, ", got ", dtype_text(a));
}

template <class A>
std::string shape_text(const A& a) {
  std::string s = "[";
  for (size_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + "]";
}

template <class A>
bool has_shape(const A& a, std::initializer_list<int64_t> want) {
  bool ok = a.ndim() == want.size();
  size_t i = 0;
  for (const int64_t w : want) ok = ok && i < a.ndim() && static_cast<int64_t>(a.shape(i++)) == w;
  return ok;
}

inline std::string shape_text(std::initializer_list<int64_t> shape) {
  std::string s = "[";
  size_t i = 0;
  for (const int64_t w : shape) s += (i++ ? ", " : "") + std::to_string(w);
  return s + "]";
}

template <class A>
void require_shape(const A& a, const char* name, std::initializer_list<int64_t> want) {
  MXMOE_REQUIRE(has_shape(a, want), name, ": expected shape ", shape_text(want), ", got ", shape_text(a));
  require_contiguous(a, name);
}

// A weight tensor's bytes on the host (copied from the GPU when it lives there).
inline std::vector<uint8_t> host_bytes(const InArray& a, const char* name) {
  const size_t bytes = a.nbytes();
  std::vector<uint8_t> out(bytes);
  if (bytes == 0) return out;
  if (a.device_type() == nb::device::cpu::value) {
    std::memcpy(out.data(), a.data(), bytes);
  } else {
    MXMOE_REQUIRE(a.device_type() == nb::device::cuda::value, name,
                  ": expected a CPU or CUDA tensor, got DLPack device type ", a.device_type());
    MXMOE_CUDA_CHECK(cudaMemcpy(out.data(), a.data(), bytes, cudaMemcpyDeviceToHost));
  }
  return out;
}

template <class T>
std::vector<T> as_vector(const std::vector<uint8_t>& bytes) {
  std::vector<T> v(bytes.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), bytes.data(), v.size() * sizeof(T));
  return v;
}

// The weight tensors of a layer of `config` (E, H, I) in the checkpoint layout, checked and copied to
// the host. with_w2_bias false: a given w2_bias is not read (a tensor-parallel rank other than 0).
inline MoeLayerData read_layer(const MoeConfig& config, const InArray& w1_blocks, const InArray& w1_scales,
                               const std::optional<InArray>& w1_bias, const InArray& w2_blocks,
                               const InArray& w2_scales, const std::optional<InArray>& w2_bias,
                               bool with_w2_bias = true) {
  const int64_t e = config.num_experts, h = config.hidden, i = config.intermediate;
  MoeLayerData data;
  const auto u8 = [](const InArray& a) { return has_dtype(a, nb::dlpack::dtype_code::UInt, 8); };
  require_dtype(u8(w1_blocks), w1_blocks, "w1_blocks", "uint8 (two e2m1 codes per byte)");
  require_shape(w1_blocks, "w1_blocks", {e, 2 * i, h / 32, 16});
  require_dtype(u8(w1_scales), w1_scales, "w1_scales", "uint8 (e8m0)");
  require_shape(w1_scales, "w1_scales", {e, 2 * i, h / 32});
  require_dtype(u8(w2_blocks), w2_blocks, "w2_blocks", "uint8 (two e2m1 codes per byte)");
  require_shape(w2_blocks, "w2_blocks", {e, h, i / 32, 16});
  require_dtype(u8(w2_scales), w2_scales, "w2_scales", "uint8 (e8m0)");
  require_shape(w2_scales, "w2_scales", {e, h, i / 32});
  data.w1_blocks = host_bytes(w1_blocks, "w1_blocks");
  data.w1_scales = host_bytes(w1_scales, "w1_scales");
  data.w2_blocks = host_bytes(w2_blocks, "w2_blocks");
  data.w2_scales = host_bytes(w2_scales, "w2_scales");
  if (w1_bias) {
    require_dtype(is_bf16_like(*w1_bias), *w1_bias, "w1_bias", kBf16);
    require_shape(*w1_bias, "w1_bias", {e, 2 * i});
    data.w1_bias = as_vector<uint16_t>(host_bytes(*w1_bias, "w1_bias"));
  }
  if (w2_bias && with_w2_bias) {
    require_dtype(is_bf16_like(*w2_bias), *w2_bias, "w2_bias", kBf16);
    require_shape(*w2_bias, "w2_bias", {e, h});
    data.w2_bias = as_vector<uint16_t>(host_bytes(*w2_bias, "w2_bias"));
  }
  return data;
}

// A tensor on a runner's device: the CPU for the reference, else the current CUDA device.
template <class A>
void require_device(const MoeRunner& runner, const A& a, const char* name) {
  const std::string backend = to_string(runner.backend());
  if (!runner.on_gpu()) {
    MXMOE_REQUIRE(a.device_type() == nb::device::cpu::value, name, ": expected a CPU tensor for backend '", backend,
                  "' (the CPU reference); pass a CPU array, or build the layer with a GPU backend");
    return;
  }
  MXMOE_REQUIRE(a.device_type() == nb::device::cuda::value, name, ": expected a CUDA tensor for backend '", backend,
                "'; move it to the GPU (e.g. tensor.cuda(), cupy.asarray), or build the layer with "
                "backend='reference' for CPU arrays");
  int current = 0;
  MXMOE_CUDA_CHECK(cudaGetDevice(&current));
  MXMOE_REQUIRE(a.device_id() == current, name, ": on CUDA device ", a.device_id(), ", expected the current device ",
                current, " (this layer's weights live there)");
}

// hidden [T, H] bf16 and out [T, H] (bf16, or fp32 with out_f32) on the runner's device; returns T.
inline int64_t check_hidden_and_out(const MoeRunner& runner, int64_t hidden_size, const InArray& hidden,
                                    const Array& out, bool out_f32 = false) {
  MXMOE_REQUIRE(hidden.ndim() == 2, "hidden: expected 2 dimensions [T, H], got ", shape_text(hidden));
  const auto tokens = static_cast<int64_t>(hidden.shape(0));
  require_dtype(is_bf16_like(hidden), hidden, "hidden", kBf16);
  require_shape(hidden, "hidden", {tokens, hidden_size});
  require_device(runner, hidden, "hidden");
  if (out_f32)
    require_dtype(has_dtype(out, nb::dlpack::dtype_code::Float, 32), out, "out", "float32");
  else
    require_dtype(is_bf16_like(out), out, "out", kBf16);
  require_shape(out, "out", {tokens, hidden_size});
  require_device(runner, out, "out");
  return tokens;
}

// The routing tensors of a call: router_logits [T, E] fp32, or topk_ids [T, k] int32/int64 (returns
// whether int64) with topk_weights [T, k] fp32, on the runner's device.
inline void check_logits(const MoeRunner& runner, const MoeConfig& config, const InArray& logits, int64_t tokens) {
  require_dtype(has_dtype(logits, nb::dlpack::dtype_code::Float, 32), logits, "router_logits", "float32");
  require_shape(logits, "router_logits", {tokens, config.num_experts});
  require_device(runner, logits, "router_logits");
}
inline bool check_routed(const MoeRunner& runner, const MoeConfig& config, const InArray& ids, const InArray& weights,
                         int64_t tokens) {
  const bool ids32 = has_dtype(ids, nb::dlpack::dtype_code::Int, 32);
  const bool ids64 = has_dtype(ids, nb::dlpack::dtype_code::Int, 64);
  require_dtype(ids32 || ids64, ids, "topk_ids", "int32 or int64");
  require_shape(ids, "topk_ids", {tokens, config.top_k});
  require_device(runner, ids, "topk_ids");
  require_dtype(has_dtype(weights, nb::dlpack::dtype_code::Float, 32), weights, "topk_weights", "float32");
  require_shape(weights, "topk_weights", {tokens, config.top_k});
  require_device(runner, weights, "topk_weights");
  return ids64;
}

// The routed forward of a Layer (target: its MoeRunner) or a ShardedLayer (its ShardedMoe): the arrays
// checked against `runner`, then target.forward_routed with the ids as int32 or int64, the GIL released.
template <class Target>
void forward_routed_arrays(const Target& target, const MoeRunner& runner, const MoeConfig& config,
                           const InArray& hidden, const InArray& ids, const InArray& weights, Array& out,
                           void* workspace, size_t workspace_bytes, uintptr_t stream) {
  const int64_t tokens = check_hidden_and_out(runner, config.hidden, hidden, out);
  const bool ids64 = check_routed(runner, config, ids, weights, tokens);
  const auto* h = static_cast<const uint16_t*>(hidden.data());
  const auto* w = static_cast<const float*>(weights.data());
  auto* o = static_cast<uint16_t*>(out.data());
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  nb::gil_scoped_release release;
  if (ids64)
    target.forward_routed(h, static_cast<const int64_t*>(ids.data()), w, tokens, o, workspace, workspace_bytes, s);
  else
    target.forward_routed(h, static_cast<const int32_t*>(ids.data()), w, tokens, o, workspace, workspace_bytes, s);
}

// A layer's runner options from the Python arguments (MXMOE_BACKEND and friends read only for auto).
inline RunnerOptions runner_options(const std::string& backend, int64_t max_tokens,
                                    const std::optional<std::string>& plan, int routed_experts = 0,
                                    const std::string& precision = "bf16") {
  MXMOE_REQUIRE(max_tokens >= 1, "max_tokens: must be >= 1, got ", max_tokens);
  RunnerOptions options;
  options.backend = parse_backend(backend);
  options.max_tokens = max_tokens;
  options.use_env = options.backend == Backend::Auto;
  if (plan) options.plan = parse_plan_override(*plan, "plan");
  options.routed_experts = routed_experts;
  options.precision = parse_precision(precision);
  return options;
}

}  // namespace mxmoe::python
