// A gpt-oss checkpoint directory: config.json plus *.safetensors, read one MoE layer at a time with
// every tensor's dtype and shape checked against the config (FACTS.md §2).
#include <algorithm>
#include <bit>
#include <cstring>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_absent.hpp"
#include "checkpoint/safetensors_dtype.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/error.hpp"
#include "mxmoe/formats.hpp"

namespace mxmoe {
namespace {

namespace cd = checkpoint_detail;
static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

std::string where(const std::filesystem::path& dir) { return "checkpoint '" + dir.string() + "': "; }

std::string dtype_list(std::initializer_list<const char*> dtypes) {
  std::string out;
  for (const char* d : dtypes) out += (out.empty() ? "" : " or ") + std::string(d);
  return out;
}

std::vector<uint16_t> to_bf16(const std::string& dtype, const std::vector<uint8_t>& bytes) {
  if (dtype == "BF16") {
    std::vector<uint16_t> out(bytes.size() / 2);
    std::memcpy(out.data(), bytes.data(), out.size() * 2);
    return out;
  }
  // F32 (already checked): converted with the library's round-to-nearest-even.
  std::vector<uint16_t> out(bytes.size() / 4);
  for (size_t i = 0; i < out.size(); ++i) {
    float x;
    std::memcpy(&x, bytes.data() + 4 * i, 4);
    out[i] = float_to_bf16(x);
  }
  return out;
}

}  // namespace

Checkpoint::Checkpoint(const std::filesystem::path& dir) : dir_(dir) {
  std::error_code ec;
  MXMOE_REQUIRE(std::filesystem::is_directory(dir, ec), where(dir), "not a directory");
  const auto config_path = dir / "config.json";
  MXMOE_REQUIRE(std::filesystem::is_regular_file(config_path, ec), where(dir), "no config.json");
  config_ = read_checkpoint_config(config_path);

  std::vector<std::filesystem::path> paths;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
    if (entry.path().extension() == ".safetensors" && entry.is_regular_file(ec)) paths.push_back(entry.path());
  MXMOE_REQUIRE(!ec, where(dir), "cannot list the directory: ", ec.message());
  MXMOE_REQUIRE(!paths.empty(), where(dir), "no *.safetensors files");
  std::sort(paths.begin(), paths.end());

  std::map<std::string, const SafetensorsFile*> owner;
  for (const auto& path : paths) {
    files_.push_back(std::make_unique<SafetensorsFile>(path));
    for (const auto& [name, info] : files_.back()->tensors()) {
      const auto [it, inserted] = owner.emplace(name, files_.back().get());
      MXMOE_REQUIRE(inserted, where(dir), "tensor '", name, "' is present in two files: '",
                    it->second->path().filename().string(), "' and '", path.filename().string(), "'");
    }
  }

  const auto original = layer_tensor_names(TensorNaming::Original, 0).w1_blocks;
  const auto hugging_face = layer_tensor_names(TensorNaming::HuggingFace, 0).w1_blocks;
  const bool has_original = owner.count(original) != 0, has_hugging_face = owner.count(hugging_face) != 0;
  MXMOE_REQUIRE(has_original || has_hugging_face, where(dir), "cannot detect the tensor naming: found neither '",
                original, "' (original) nor '", hugging_face, "' (Hugging Face)");
  MXMOE_REQUIRE(!(has_original && has_hugging_face), where(dir), "ambiguous tensor naming: both '", original,
                "' and '", hugging_face, "' are present");
  naming_ = has_original ? TensorNaming::Original : TensorNaming::HuggingFace;
}

const SafetensorsFile& Checkpoint::file_with(const std::string& tensor) const {
  for (const auto& file : files_)
    if (file->contains(tensor)) return *file;
  detail::throw_error(where(dir_), "missing tensor '", tensor, "' (", to_string(naming_), " naming, ", files_.size(),
                      " safetensors files)");
}

MoeLayerData Checkpoint::load_layer(int layer) const {
  MXMOE_REQUIRE(layer >= 0 && layer < config_.num_layers, where(dir_), "layer ", layer, " is out of range [0, ",
                config_.num_layers, ")");
  const LayerTensorNames names = layer_tensor_names(naming_, layer);
  const int64_t E = config_.moe.num_experts, H = config_.moe.hidden, I = config_.moe.intermediate;

  // Tensors that write_checkpoint recorded as deliberately left out (a layer without bias or router).
  std::set<std::string> absent;
  for (const auto& file : files_) {
    const auto names_absent = cd::parse_absent(file->metadata());
    absent.insert(names_absent.begin(), names_absent.end());
  }

  // Returns the tensor's bytes after checking dtype and shape; nullopt only for an optional tensor
  // that the writer recorded as absent.
  auto load = [&](const std::string& name, std::initializer_list<const char*> dtypes, std::vector<int64_t> shape,
                  bool optional, std::string* dtype_out) -> std::optional<std::vector<uint8_t>> {
    bool present = false;
    for (const auto& file : files_) present = present || file->contains(name);
    if (!present && optional && absent.count(name)) return std::nullopt;
    const SafetensorsFile& file = file_with(name);
    const TensorInfo& info = file.info(name);
    const std::string in = where(dir_) + "tensor '" + name + "' in '" + file.path().filename().string() + "': ";
    MXMOE_REQUIRE(std::find(dtypes.begin(), dtypes.end(), info.dtype) != dtypes.end(), in, "dtype ", info.dtype,
                  ", expected ", dtype_list(dtypes));
    MXMOE_REQUIRE(info.shape == shape, in, "shape ", cd::shape_string(info.shape), ", expected ",
                  cd::shape_string(shape), " (E=", E, ", H=", H, ", I=", I, ")");
    if (dtype_out) *dtype_out = info.dtype;
    return file.read(name);
  };
  auto load_u8 = [&](const std::string& name, std::vector<int64_t> shape) {
    return std::move(*load(name, {"U8"}, std::move(shape), false, nullptr));
  };
  auto load_bf16 = [&](const std::string& name, std::vector<int64_t> shape) {
    std::string dtype;
    auto bytes = load(name, {"BF16", "F32"}, std::move(shape), true, &dtype);
    return bytes ? to_bf16(dtype, *bytes) : std::vector<uint16_t>{};
  };

  MoeLayerData data;
  data.w1_blocks = load_u8(names.w1_blocks, {E, 2 * I, H / 32, 16});
  data.w1_scales = load_u8(names.w1_scales, {E, 2 * I, H / 32});
  data.w1_bias = load_bf16(names.w1_bias, {E, 2 * I});
  data.w2_blocks = load_u8(names.w2_blocks, {E, H, I / 32, 16});
  data.w2_scales = load_u8(names.w2_scales, {E, H, I / 32});
  data.w2_bias = load_bf16(names.w2_bias, {E, H});
  data.router_weight = load_bf16(names.router_weight, {E, H});
  data.router_bias = load_bf16(names.router_bias, {E});
  return data;
}

}  // namespace mxmoe
