// The `mxmoe._mxmoe` extension (nanobind): the C++ library's runner over DLPack tensors, the probe,
// configs and the checkpoint reader. Thin on purpose: python/mxmoe/ holds the Python API.
#include <cuda_runtime.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "mxmoe/mxmoe.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace mxmoe::python {
namespace {

// Any layout is accepted at the boundary (no implicit copies: a copied `out` would never be written
// back), then checked: every tensor must be C-contiguous. Inputs may be read-only (InArray); `out`
// must be writable (Array).
using Array = nb::ndarray<>;
using InArray = nb::ndarray<nb::ro>;

// What to pass for a bf16 tensor, in every dtype error that asks for one.
constexpr const char* kBf16 =
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
void require_shape(const A& a, const char* name, std::initializer_list<int64_t> want) {
  bool ok = a.ndim() == want.size();
  size_t i = 0;
  for (const int64_t w : want) ok = ok && static_cast<int64_t>(a.shape(i++)) == w;
  std::string expected = "[";
  i = 0;
  for (const int64_t w : want) expected += (i++ ? ", " : "") + std::to_string(w);
  MXMOE_REQUIRE(ok, name, ": expected shape ", expected, "], got ", shape_text(a));
  require_contiguous(a, name);
}

// A weight tensor's bytes on the host (copied from the GPU when it lives there).
std::vector<uint8_t> host_bytes(const InArray& a, const char* name) {
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

// One MoE layer: the runner (which uploads or copies the weights) and, for a GPU
// backend, its workspace, sized once for max_tokens so that forward allocates nothing (graph-safe).
// plan: MXMOE_PLAN's string form (mxmoe/plan_override.hpp), forcing parts of the GPU plan; None or
// empty leaves MXMOE_PLAN's value, where it is set.
class Layer {
 public:
  Layer(const MoeConfig& config, const InArray& w1_blocks, const InArray& w1_scales, std::optional<InArray> w1_bias,
        const InArray& w2_blocks, const InArray& w2_scales, std::optional<InArray> w2_bias, const std::string& backend,
        int64_t max_tokens, const std::optional<std::string>& plan)
      : config_(config) {
    config_.validate();
    const int64_t e = config.num_experts, h = config.hidden, i = config.intermediate;
    // The host copy lives only as long as the constructor: every backend keeps its own (the GPU ones
    // uploaded, the CPU reference copied).
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
    if (w2_bias) {
      require_dtype(is_bf16_like(*w2_bias), *w2_bias, "w2_bias", kBf16);
      require_shape(*w2_bias, "w2_bias", {e, h});
      data.w2_bias = as_vector<uint16_t>(host_bytes(*w2_bias, "w2_bias"));
    }
    MXMOE_REQUIRE(max_tokens >= 1, "max_tokens: must be >= 1, got ", max_tokens);
    RunnerOptions options;
    options.backend = parse_backend(backend);
    options.max_tokens = max_tokens;
    options.use_env = options.backend == Backend::Auto;
    if (plan) options.plan = parse_plan_override(*plan, "plan");
    runner_ = std::make_unique<MoeRunner>(config_, data.view(), options);
    if (runner_->on_gpu()) workspace_ = DeviceBuffer(std::max<size_t>(runner_->workspace_bytes(), 1));
  }

  // hidden [T, H] bf16, router_logits [T, E] fp32, out [T, H] bf16: all on the CPU (reference
  // backend) or all on the runner's GPU. stream: a cudaStream_t as an integer (0: the legacy stream).
  void forward(const InArray& hidden, const InArray& logits, Array& out, uintptr_t stream) {
    const int64_t tokens = check_hidden_and_out(hidden, out);
    require_dtype(has_dtype(logits, nb::dlpack::dtype_code::Float, 32), logits, "router_logits", "float32");
    require_shape(logits, "router_logits", {tokens, config_.num_experts});
    require_device(logits, "router_logits");
    const auto* h = static_cast<const uint16_t*>(hidden.data());
    const auto* l = static_cast<const float*>(logits.data());
    auto* o = static_cast<uint16_t*>(out.data());
    nb::gil_scoped_release release;
    runner_->forward(h, l, tokens, o, workspace_.get(), workspace_.bytes(), reinterpret_cast<cudaStream_t>(stream));
  }

  // The engine's routing in place of the logits: topk_ids [T, k] int32 or int64 (read as they are, on
  // the GPU too: no conversion, no host read) and topk_weights [T, k] float32, used as given.
  void forward_routed(const InArray& hidden, const InArray& ids, const InArray& weights, Array& out,
                      uintptr_t stream) {
    const int64_t tokens = check_hidden_and_out(hidden, out);
    const bool ids32 = has_dtype(ids, nb::dlpack::dtype_code::Int, 32);
    const bool ids64 = has_dtype(ids, nb::dlpack::dtype_code::Int, 64);
    require_dtype(ids32 || ids64, ids, "topk_ids", "int32 or int64");
    require_shape(ids, "topk_ids", {tokens, config_.top_k});
    require_device(ids, "topk_ids");
    require_dtype(has_dtype(weights, nb::dlpack::dtype_code::Float, 32), weights, "topk_weights", "float32");
    require_shape(weights, "topk_weights", {tokens, config_.top_k});
    require_device(weights, "topk_weights");
    const auto* h = static_cast<const uint16_t*>(hidden.data());
    const auto* w = static_cast<const float*>(weights.data());
    auto* o = static_cast<uint16_t*>(out.data());
    const auto s = reinterpret_cast<cudaStream_t>(stream);
    nb::gil_scoped_release release;
    if (ids64)
      runner_->forward_routed(h, static_cast<const int64_t*>(ids.data()), w, tokens, o, workspace_.get(),
                              workspace_.bytes(), s);
    else
      runner_->forward_routed(h, static_cast<const int32_t*>(ids.data()), w, tokens, o, workspace_.get(),
                              workspace_.bytes(), s);
  }

  std::string backend() const { return to_string(runner_->backend()); }
  std::string describe_plan(int64_t tokens) const { return runner_->describe_plan(tokens); }
  int64_t max_tokens() const { return runner_->max_tokens(); }
  const MoeConfig& config() const { return config_; }

 private:
  // A tensor on the runner's device: the CPU for the reference, else the current CUDA device.
  template <class A>
  void require_device(const A& a, const char* name) const {
    const std::string backend = to_string(runner_->backend());
    if (!runner_->on_gpu()) {
      MXMOE_REQUIRE(a.device_type() == nb::device::cpu::value, name, ": expected a CPU tensor for backend '", backend,
                    "' (the CPU reference); pass a CPU array, or build the layer with a GPU backend");
      return;
    }
    MXMOE_REQUIRE(a.device_type() == nb::device::cuda::value, name, ": expected a CUDA tensor for backend '", backend,
                  "'; move it to the GPU (e.g. tensor.cuda(), cupy.asarray), or build the layer with "
                  "backend='reference' for CPU arrays");
    int current = 0;
    MXMOE_CUDA_CHECK(cudaGetDevice(&current));
    MXMOE_REQUIRE(a.device_id() == current, name, ": on CUDA device ", a.device_id(),
                  ", expected the current device ", current, " (this layer's weights live there)");
  }

  // hidden [T, H] and out [T, H], bf16, on the runner's device; returns T.
  int64_t check_hidden_and_out(const InArray& hidden, const Array& out) const {
    MXMOE_REQUIRE(hidden.ndim() == 2, "hidden: expected 2 dimensions [T, H], got ", shape_text(hidden));
    const auto tokens = static_cast<int64_t>(hidden.shape(0));
    require_dtype(is_bf16_like(hidden), hidden, "hidden", kBf16);
    require_shape(hidden, "hidden", {tokens, config_.hidden});
    require_device(hidden, "hidden");
    require_dtype(is_bf16_like(out), out, "out", kBf16);
    require_shape(out, "out", {tokens, config_.hidden});
    require_device(out, "out");
    return tokens;
  }

  MoeConfig config_;
  std::unique_ptr<MoeRunner> runner_;
  DeviceBuffer workspace_;
};

template <class T>
nb::ndarray<nb::numpy, T> to_numpy(std::vector<T> v, std::initializer_list<size_t> shape) {
  auto* owned = new std::vector<T>(std::move(v));
  nb::capsule deleter(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T>(owned->data(), shape, deleter);
}

// Layer n of a gpt-oss checkpoint directory: (config, dict of numpy arrays in the checkpoint layout;
// the bf16 tensors as uint16 bits).
nb::tuple load_gpt_oss(const std::string& path, int layer) {
  const Checkpoint ckpt(path);
  MoeLayerData d = ckpt.load_layer(layer);
  const MoeConfig& c = ckpt.config().moe;
  const size_t e = c.num_experts, h = c.hidden, i = c.intermediate;
  nb::dict w;
  w["w1_blocks"] = to_numpy(std::move(d.w1_blocks), {e, 2 * i, h / 32, 16});
  w["w1_scales"] = to_numpy(std::move(d.w1_scales), {e, 2 * i, h / 32});
  w["w2_blocks"] = to_numpy(std::move(d.w2_blocks), {e, h, i / 32, 16});
  w["w2_scales"] = to_numpy(std::move(d.w2_scales), {e, h, i / 32});
  if (!d.w1_bias.empty()) w["w1_bias"] = to_numpy(std::move(d.w1_bias), {e, 2 * i});
  if (!d.w2_bias.empty()) w["w2_bias"] = to_numpy(std::move(d.w2_bias), {e, h});
  if (!d.router_weight.empty()) w["router_weight"] = to_numpy(std::move(d.router_weight), {e, h});
  if (!d.router_bias.empty()) w["router_bias"] = to_numpy(std::move(d.router_bias), {e});
  return nb::make_tuple(c, w);
}

// A gpt-oss-format checkpoint of random, checkpoint-like layers (tests and examples).
void write_random_checkpoint(const std::string& path, const MoeConfig& config, int layers, uint64_t seed,
                             bool hf_names) {
  MXMOE_REQUIRE(layers >= 1, "layers: must be >= 1, got ", layers);
  config.validate();
  CheckpointConfig cc;
  cc.moe = config;
  cc.num_layers = layers;
  cc.quant_method = "mxfp4";
  std::vector<MoeLayerData> data;
  for (int l = 0; l < layers; ++l) data.push_back(MoeLayerData::random(config, seed + static_cast<uint64_t>(l)));
  write_checkpoint(path, cc, data, hf_names ? TensorNaming::HuggingFace : TensorNaming::Original);
}

}  // namespace
}  // namespace mxmoe::python

NB_MODULE(_mxmoe, m) {
  using namespace mxmoe;
  using mxmoe::python::Layer;
  m.doc() = "mxmoe: the fused MXFP4 Mixture-of-Experts layer (C++/CUDA) for Python";
  nb::exception<Error>(m, "Error", PyExc_ValueError);

  m.def("probe_json", [] { return probe_to_json(probe()); }, "The capability probe as a JSON string.");
  m.def("backend_names", &backend_names, "The backend names `backend=` accepts.");

  nb::class_<MoeConfig>(m, "MoeConfig", "The shape and semantics of one MoE layer.")
      .def(nb::init<>())
      .def_static("preset", &MoeConfig::preset, "name"_a, "A named preset: gpt-oss-20b, gpt-oss-120b or tiny.")
      .def_static("preset_names", &MoeConfig::preset_names)
      .def_rw("name", &MoeConfig::name)
      .def_rw("num_experts", &MoeConfig::num_experts)
      .def_rw("top_k", &MoeConfig::top_k)
      .def_rw("hidden", &MoeConfig::hidden)
      .def_rw("intermediate", &MoeConfig::intermediate)
      .def_rw("renormalize", &MoeConfig::renormalize)
      .def_rw("swiglu_alpha", &MoeConfig::swiglu_alpha)
      .def_rw("swiglu_limit", &MoeConfig::swiglu_limit)
      .def_prop_rw(
          "routing", [](const MoeConfig& c) { return c.routing == RoutingOrder::TopkThenSoftmax ? "topk_softmax" : "softmax_topk"; },
          [](MoeConfig& c, const std::string& r) {
            MXMOE_REQUIRE(r == "topk_softmax" || r == "softmax_topk", "routing: expected 'topk_softmax' or 'softmax_topk', got '", r, "'");
            c.routing = r == "topk_softmax" ? RoutingOrder::TopkThenSoftmax : RoutingOrder::SoftmaxThenTopk;
          })
      .def("validate", &MoeConfig::validate, "Raises mxmoe.Error naming the first invalid field.")
      .def("__repr__", [](const MoeConfig& c) {
        return "MoeConfig(name='" + c.name + "', num_experts=" + std::to_string(c.num_experts) + ", top_k=" +
               std::to_string(c.top_k) + ", hidden=" + std::to_string(c.hidden) + ", intermediate=" +
               std::to_string(c.intermediate) + ")";
      });

  nb::class_<Layer>(m, "Layer", "One MoE layer's weights, uploaded once, and its runner.")
      .def(nb::init<const MoeConfig&, const python::InArray&, const python::InArray&, std::optional<python::InArray>,
                    const python::InArray&, const python::InArray&, std::optional<python::InArray>,
                    const std::string&, int64_t, const std::optional<std::string>&>(),
           "config"_a, "w1_blocks"_a, "w1_scales"_a, "w1_bias"_a.none(), "w2_blocks"_a, "w2_scales"_a,
           "w2_bias"_a.none(), "backend"_a = "auto", "max_tokens"_a = 4096, "plan"_a.none() = nb::none())
      .def("forward", &Layer::forward, "hidden"_a.noconvert(), "router_logits"_a.noconvert(), "out"_a.noconvert(),
           "stream"_a = 0)
      .def("forward_routed", &Layer::forward_routed, "hidden"_a.noconvert(), "topk_ids"_a.noconvert(),
           "topk_weights"_a.noconvert(), "out"_a.noconvert(), "stream"_a = 0)
      .def_prop_ro("backend", &Layer::backend)
      .def_prop_ro("max_tokens", &Layer::max_tokens)
      .def_prop_ro("config", &Layer::config)
      .def("describe_plan", &Layer::describe_plan, "tokens"_a);

  m.def("load_gpt_oss", &python::load_gpt_oss, "path"_a, "layer"_a);
  m.def("write_random_checkpoint", &python::write_random_checkpoint, "path"_a, "config"_a, "layers"_a, "seed"_a = 0,
        "hf_names"_a = true);
}
