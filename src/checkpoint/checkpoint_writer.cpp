// write_checkpoint: a gpt-oss-format directory (config.json + model.safetensors) that Checkpoint
// reads back bit for bit. Used by tests and tools to make checkpoints of any size.
#include <cstring>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_absent.hpp"
#include "checkpoint/checkpoint_config.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/error.hpp"

namespace mxmoe {
namespace {

template <class T>
std::vector<uint8_t> as_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

}  // namespace

void write_checkpoint(const std::filesystem::path& dir, const CheckpointConfig& config,
                      const std::vector<MoeLayerData>& layers, TensorNaming naming) {
  const std::string where = "write_checkpoint '" + dir.string() + "': ";
  config.moe.validate();
  MXMOE_REQUIRE(config.num_layers > 0 && static_cast<size_t>(config.num_layers) == layers.size(), where,
                "layers.size() = ", layers.size(), ", expected config.num_layers = ", config.num_layers);
  MXMOE_REQUIRE(config.quant_method.empty() || config.quant_method == "mxfp4", where, "quant_method '",
                config.quant_method, "': only 'mxfp4' can be written");
  MXMOE_REQUIRE(naming == TensorNaming::Original || naming == TensorNaming::HuggingFace, where, "naming = ",
                static_cast<int>(naming), ": expected a TensorNaming value");

  const int64_t E = config.moe.num_experts, H = config.moe.hidden, I = config.moe.intermediate;
  std::map<std::string, TensorData> tensors;
  std::vector<std::string> absent;
  for (size_t n = 0; n < layers.size(); ++n) {
    const MoeLayerData& layer = layers[n];
    const LayerTensorNames names = layer_tensor_names(naming, static_cast<int>(n));
    auto add = [&](const std::string& name, const char* field, const auto& values, std::vector<int64_t> shape,
                   const char* dtype, bool optional) {
      if (values.empty() && optional) {
        absent.push_back(name);
        return;
      }
      int64_t count = 1;
      for (int64_t d : shape) count *= d;
      MXMOE_REQUIRE(values.size() == static_cast<size_t>(count), where, "layer ", n, " ", field, " has ",
                    values.size(), " elements, expected ", count, optional ? " (or none)" : "");
      tensors[name] = TensorData{dtype, std::move(shape), as_bytes(values)};
    };
    add(names.w1_blocks, "w1_blocks", layer.w1_blocks, {E, 2 * I, H / 32, 16}, "U8", false);
    add(names.w1_scales, "w1_scales", layer.w1_scales, {E, 2 * I, H / 32}, "U8", false);
    add(names.w1_bias, "w1_bias", layer.w1_bias, {E, 2 * I}, "BF16", true);
    add(names.w2_blocks, "w2_blocks", layer.w2_blocks, {E, H, I / 32, 16}, "U8", false);
    add(names.w2_scales, "w2_scales", layer.w2_scales, {E, H, I / 32}, "U8", false);
    add(names.w2_bias, "w2_bias", layer.w2_bias, {E, H}, "BF16", true);
    add(names.router_weight, "router_weight", layer.router_weight, {E, H}, "BF16", true);
    add(names.router_bias, "router_bias", layer.router_bias, {E}, "BF16", true);
  }

  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  MXMOE_REQUIRE(!ec, where, "cannot create the directory: ", ec.message());
  std::map<std::string, std::string> metadata{{"format", "pt"}};
  if (!absent.empty()) metadata[checkpoint_detail::kAbsentTensorsKey] = checkpoint_detail::format_absent(absent);
  write_safetensors(dir / "model.safetensors", tensors, metadata);
  CheckpointConfig written = config;
  written.quant_method = "mxfp4";
  checkpoint_detail::write_checkpoint_config(dir / "config.json", written, naming);
}

}  // namespace mxmoe
