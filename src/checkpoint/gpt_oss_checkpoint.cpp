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

std::set<std::string> Checkpoint::absent_tensors() const {
  std::set<std::string> absent;
  for (const auto& file : files_) {
    const auto names = cd::parse_absent(file->metadata());
    absent.insert(names.begin(), names.end());
  }
  return absent;
}

const SafetensorsFile* Checkpoint::checked_tensor(const std::string& name, std::initializer_list<const char*> dtypes,
                                                  const std::vector<int64_t>& shape, bool optional,
                                                  const std::set<std::string>& absent) const {
  bool present = false;
  for (const auto& file : files_) present = present || file->contains(name);
  if (!present && optional && absent.count(name)) return nullptr;
  const SafetensorsFile& file = file_with(name);
  const TensorInfo& info = file.info(name);
  const std::string in = where(dir_) + "tensor '" + name + "' in '" + file.path().filename().string() + "': ";
  MXMOE_REQUIRE(std::find(dtypes.begin(), dtypes.end(), info.dtype) != dtypes.end(), in, "dtype ", info.dtype,
                ", expected ", dtype_list(dtypes));
  const MoeConfig& m = config_.moe;
  MXMOE_REQUIRE(info.shape == shape, in, "shape ", cd::shape_string(info.shape), ", expected ", cd::shape_string(shape),
                " (E=", m.num_experts, ", H=", m.hidden, ", I=", m.intermediate, ")");
  return &file;
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

  const std::set<std::string> absent = absent_tensors();
  auto load_u8 = [&](const std::string& name, const std::vector<int64_t>& shape) {
    return checked_tensor(name, {"U8"}, shape, false, absent)->read(name);
  };
  auto load_bf16 = [&](const std::string& name, const std::vector<int64_t>& shape) {
    const SafetensorsFile* file = checked_tensor(name, {"BF16", "F32"}, shape, true, absent);
    return file == nullptr ? std::vector<uint16_t>{} : cd::bf16_values(file->info(name).dtype, file->read(name));
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
