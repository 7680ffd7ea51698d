// The `mxmoe._mxmoe` extension (nanobind): the C++ library's runner over DLPack tensors, the probe,
// configs and the checkpoint reader. Thin on purpose: python/mxmoe/ holds the Python API. The checks of
// tensors at the boundary are in tensor_args.hpp, a rank's shard of a layer in sharded_layer.hpp (headers:
// the extension is one translation unit).
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
#include "sharded_layer.hpp"
#include "tensor_args.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace mxmoe::python {
namespace {

// One MoE layer: the runner (which uploads or copies the weights) and, for a GPU
// backend, its workspace, sized once for max_tokens so that forward allocates nothing (graph-safe).
// plan: MXMOE_PLAN's string form (mxmoe/plan_override.hpp), forcing parts of the GPU plan; None or
// empty leaves MXMOE_PLAN's value, where it is set.
class Layer {
 public:
  Layer(const MoeConfig& config, const InArray& w1_blocks, const InArray& w1_scales, std::optional<InArray> w1_bias,
        const InArray& w2_blocks, const InArray& w2_scales, std::optional<InArray> w2_bias, const std::string& backend,
        int64_t max_tokens, const std::optional<std::string>& plan, int routed_experts, const std::string& precision)
      : config_(config) {
    config_.validate();
    // The host copy lives only as long as the constructor: every backend keeps its own (the GPU ones
    // uploaded, the CPU reference copied).
    const MoeLayerData data = read_layer(config_, w1_blocks, w1_scales, w1_bias, w2_blocks, w2_scales, w2_bias);
    const RunnerOptions options = runner_options(backend, max_tokens, plan, routed_experts, precision);
    runner_ = std::make_unique<MoeRunner>(config_, data.view(), options);
    if (runner_->on_gpu()) workspace_ = DeviceBuffer(std::max<size_t>(runner_->workspace_bytes(), 1));
  }

  // hidden [T, H] bf16, router_logits [T, E] fp32, out [T, H] bf16: all on the CPU (reference
  // backend) or all on the runner's GPU. stream: a cudaStream_t as an integer (0: the legacy stream).
  void forward(const InArray& hidden, const InArray& logits, Array& out, uintptr_t stream) {
    const int64_t tokens = check_hidden_and_out(*runner_, config_.hidden, hidden, out);
    check_logits(*runner_, config_, logits, tokens);
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
    forward_routed_arrays(*runner_, *runner_, config_, hidden, ids, weights, out, workspace_.get(), workspace_.bytes(),
                          stream);
  }

  std::string backend() const { return to_string(runner_->backend()); }
  std::string precision() const { return to_string(runner_->precision()); }
  std::string describe_plan(int64_t tokens) const { return runner_->describe_plan(tokens); }
  int64_t max_tokens() const { return runner_->max_tokens(); }
  const MoeConfig& config() const { return config_; }

 private:
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
// the bf16 tensors as uint16 bits). With a shard: only that rank's part, read as only its bytes
// (Checkpoint::load_layer_shard), in its shapes; the config is the whole layer's.
nb::tuple load_gpt_oss(const std::string& path, int layer, const std::optional<ShardSpec>& shard) {
  const Checkpoint ckpt(path);
  const MoeConfig& full = ckpt.config().moe;
  std::optional<LayerShard> resolved;
  if (shard) resolved = resolve_named(full, *shard, "shard");
  MoeLayerData d = shard ? ckpt.load_layer_shard(layer, *shard) : ckpt.load_layer(layer);
  const MoeConfig& c = resolved ? resolved->local : full;
  const size_t e = c.num_experts, h = c.hidden, i = c.intermediate;
  nb::dict w;
  w["w1_blocks"] = to_numpy(std::move(d.w1_blocks), {e, 2 * i, h / 32, 16});
  w["w1_scales"] = to_numpy(std::move(d.w1_scales), {e, 2 * i, h / 32});
  w["w2_blocks"] = to_numpy(std::move(d.w2_blocks), {e, h, i / 32, 16});
  w["w2_scales"] = to_numpy(std::move(d.w2_scales), {e, h, i / 32});
  if (!d.w1_bias.empty()) w["w1_bias"] = to_numpy(std::move(d.w1_bias), {e, 2 * i});
  if (!d.w2_bias.empty()) w["w2_bias"] = to_numpy(std::move(d.w2_bias), {e, h});
  // The router is the whole layer's (every rank routes over all E experts).
  const size_t re = full.num_experts, rh = full.hidden;
  if (!d.router_weight.empty()) w["router_weight"] = to_numpy(std::move(d.router_weight), {re, rh});
  if (!d.router_bias.empty()) w["router_bias"] = to_numpy(std::move(d.router_bias), {re});
  return nb::make_tuple(full, w);
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
                    const std::string&, int64_t, const std::optional<std::string>&, int, const std::string&>(),
           "config"_a, "w1_blocks"_a, "w1_scales"_a, "w1_bias"_a.none(), "w2_blocks"_a, "w2_scales"_a,
           "w2_bias"_a.none(), "backend"_a = "auto", "max_tokens"_a = 4096, "plan"_a.none() = nb::none(),
           "routed_experts"_a = 0, "precision"_a = "bf16")
      .def("forward", &Layer::forward, "hidden"_a.noconvert(), "router_logits"_a.noconvert(), "out"_a.noconvert(),
           "stream"_a = 0)
      .def("forward_routed", &Layer::forward_routed, "hidden"_a.noconvert(), "topk_ids"_a.noconvert(),
           "topk_weights"_a.noconvert(), "out"_a.noconvert(), "stream"_a = 0)
      .def_prop_ro("precision", &Layer::precision)
      .def_prop_ro("backend", &Layer::backend)
      .def_prop_ro("max_tokens", &Layer::max_tokens)
      .def_prop_ro("config", &Layer::config)
      .def("describe_plan", &Layer::describe_plan, "tokens"_a);

  nb::class_<ShardSpec>(m, "ShardSpec",
                        "One rank's part of a layer over world_size ranks: mode 'tensor' ('tp': a slice of the "
                        "intermediate dimension in whole MX blocks) or 'expert' ('ep': whole experts, a "
                        "contiguous range or expert_map: [E] global expert -> local id or -1).")
      .def(
          "__init__",
          [](ShardSpec* s, const std::string& mode, int rank, int world_size,
             const std::optional<std::vector<int32_t>>& expert_map) {
            new (s) ShardSpec();
            s->mode = parse_shard_mode(mode);
            s->rank = rank;
            s->world_size = world_size;
            if (expert_map) s->expert_map = *expert_map;
          },
          "mode"_a = "tensor", "rank"_a = 0, "world_size"_a = 1, "expert_map"_a.none() = nb::none())
      .def_prop_rw(
          "mode", [](const ShardSpec& s) { return to_string(s.mode); },
          [](ShardSpec& s, const std::string& mode) { s.mode = parse_shard_mode(mode); })
      .def_rw("rank", &ShardSpec::rank)
      .def_rw("world_size", &ShardSpec::world_size)
      .def_rw("expert_map", &ShardSpec::expert_map)
      .def("__eq__", [](const ShardSpec& a, const ShardSpec& b) {
        return a.mode == b.mode && a.rank == b.rank && a.world_size == b.world_size && a.expert_map == b.expert_map;
      })
      // Picklable: a spec travels to spawned processes (torch.multiprocessing.spawn's arguments).
      .def("__getstate__", [](const ShardSpec& s) { return nb::make_tuple(to_string(s.mode), s.rank, s.world_size,
                                                                          s.expert_map); })
      .def("__setstate__",
           [](ShardSpec& s, const nb::tuple& state) {
             new (&s) ShardSpec();
             s.mode = parse_shard_mode(nb::cast<std::string>(state[0]));
             s.rank = nb::cast<int>(state[1]);
             s.world_size = nb::cast<int>(state[2]);
             s.expert_map = nb::cast<std::vector<int32_t>>(state[3]);
           })
      .def("__repr__", [](const ShardSpec& s) {
        std::string map;
        for (size_t e = 0; e < s.expert_map.size(); ++e) map += (e ? ", " : "") + std::to_string(s.expert_map[e]);
        return "ShardSpec(mode='" + to_string(s.mode) + "', rank=" + std::to_string(s.rank) + ", world_size=" +
               std::to_string(s.world_size) + (s.expert_map.empty() ? "" : ", expert_map=[" + map + "]") + ")";
      });

  nb::class_<python::ShardedLayer>(m, "ShardedLayer",
                                   "One rank's shard of a layer; every forward writes the rank's partial output.")
      .def(nb::init<const MoeConfig&, const ShardSpec&, const python::InArray&, const python::InArray&,
                    std::optional<python::InArray>, const python::InArray&, const python::InArray&,
                    std::optional<python::InArray>, const std::string&, int64_t, const std::optional<std::string>&>(),
           "config"_a, "shard"_a, "w1_blocks"_a, "w1_scales"_a, "w1_bias"_a.none(), "w2_blocks"_a, "w2_scales"_a,
           "w2_bias"_a.none(), "backend"_a = "auto", "max_tokens"_a = 4096, "plan"_a.none() = nb::none())
      .def("forward", &python::ShardedLayer::forward, "hidden"_a.noconvert(), "router_logits"_a.noconvert(),
           "out"_a.noconvert(), "stream"_a = 0)
      .def("forward_f32", &python::ShardedLayer::forward_f32, "hidden"_a.noconvert(), "router_logits"_a.noconvert(),
           "out"_a.noconvert(), "stream"_a = 0)
      .def("forward_routed", &python::ShardedLayer::forward_routed, "hidden"_a.noconvert(), "topk_ids"_a.noconvert(),
           "topk_weights"_a.noconvert(), "out"_a.noconvert(), "stream"_a = 0)
      .def_prop_ro("backend", &python::ShardedLayer::backend)
      .def_prop_ro("max_tokens", &python::ShardedLayer::max_tokens)
      .def_prop_ro("config", &python::ShardedLayer::config)
      .def_prop_ro("local_config", &python::ShardedLayer::local_config)
      .def_prop_ro("shard", &python::ShardedLayer::spec)
      .def_prop_ro("local_experts", &python::ShardedLayer::local_experts)
      .def_prop_ro("block_begin", &python::ShardedLayer::block_begin)
      .def_prop_ro("block_count", &python::ShardedLayer::block_count)
      .def_prop_ro("has_w2_bias", &python::ShardedLayer::has_w2_bias)
      .def_prop_ro("sliced", &python::ShardedLayer::sliced)
      .def("describe_plan", &python::ShardedLayer::describe_plan, "tokens"_a);

  m.def("load_gpt_oss", &python::load_gpt_oss, "path"_a, "layer"_a, "shard"_a.none() = nb::none(),
        "Layer `layer` of a gpt-oss checkpoint directory: (config, dict of NumPy arrays in the checkpoint layout, "
        "bf16 as uint16 bits). shard: a ShardSpec; only that rank's part is read (its bytes only), in its shapes.");
  m.def("write_random_checkpoint", &python::write_random_checkpoint, "path"_a, "config"_a, "layers"_a, "seed"_a = 0,
        "hf_names"_a = true);
}
