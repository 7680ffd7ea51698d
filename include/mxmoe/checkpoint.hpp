#pragma once
// gpt-oss checkpoints: safetensors files (original and Hugging Face tensor names) and config.json
// (FACTS.md §2). Every byte of a file is treated as hostile: lengths, offsets, shapes and dtypes
// are checked before anything is read, and each problem throws mxmoe::Error with its own message.
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "mxmoe/config.hpp"
#include "mxmoe/shard.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe {

enum class TensorNaming { Original, HuggingFace };
std::string to_string(TensorNaming naming);

// --- safetensors --------------------------------------------------------------------------------
struct TensorInfo {
  std::string dtype;            // "U8", "BF16", "F32", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range relative to the end of the header
};

// One .safetensors file, its header parsed and validated at open; tensor data read on demand.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::filesystem::path& path);
  const std::filesystem::path& path() const { return path_; }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;  // throws if missing
  std::vector<uint8_t> read(const std::string& name) const;  // the tensor's raw bytes
  // Only the given runs of the tensor's bytes (relative to its first byte, each inside it), concatenated
  // (shard_reader.cpp: a shard reads its rows and column blocks, not the whole tensor).
  std::vector<uint8_t> read_runs(const std::string& name, const std::vector<ByteRun>& runs) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::filesystem::path path_;
  uint64_t data_begin_ = 0;  // file offset of the data section
  uint64_t file_size_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A tensor to write: raw little-endian bytes with dtype and shape.
struct TensorData {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
void write_safetensors(const std::filesystem::path& path, const std::map<std::string, TensorData>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// --- gpt-oss --------------------------------------------------------------------------------------
struct CheckpointConfig {
  MoeConfig moe;            // experts, top-k, hidden, intermediate, swiglu_limit
  int num_layers = 0;
  std::string quant_method;  // "mxfp4"
};
// Reads config.json (Hugging Face keys, or the original release's keys). Throws on missing keys,
// wrong types, or a quant_method other than mxfp4.
CheckpointConfig read_checkpoint_config(const std::filesystem::path& config_json);

// The tensor names of layer n's MoE block in a naming.
struct LayerTensorNames {
  std::string router_weight, router_bias, w1_blocks, w1_scales, w1_bias, w2_blocks, w2_scales, w2_bias;
};
LayerTensorNames layer_tensor_names(TensorNaming naming, int layer);

// A checkpoint directory: config.json plus one or more *.safetensors files.
class Checkpoint {
 public:
  explicit Checkpoint(const std::filesystem::path& dir);
  const CheckpointConfig& config() const { return config_; }
  TensorNaming naming() const { return naming_; }
  // Layer n's router and experts, shapes and dtypes checked against config().
  MoeLayerData load_layer(int layer) const;
  // Layer n's part for one rank (shard.hpp), reading only that rank's bytes of the expert tensors
  // (shard_byte_runs); the router is read whole. Equal to slice_layer of load_layer.
  MoeLayerData load_layer_shard(int layer, const ShardSpec& spec) const;

 private:
  std::filesystem::path dir_;
  CheckpointConfig config_;
  TensorNaming naming_ = TensorNaming::HuggingFace;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  const SafetensorsFile& file_with(const std::string& tensor) const;
  // The tensors write_checkpoint recorded as deliberately left out (a layer without bias or router).
  std::set<std::string> absent_tensors() const;
  // The file holding tensor `name` once its dtype (one of `dtypes`) and shape are checked; null only
  // for an optional tensor recorded in `absent`. load_layer and load_layer_shard read through it.
  const SafetensorsFile* checked_tensor(const std::string& name, std::initializer_list<const char*> dtypes,
                                        const std::vector<int64_t>& shape, bool optional,
                                        const std::set<std::string>& absent) const;
};

// Writes a gpt-oss-format checkpoint (config.json + model.safetensors) of the given layers.
void write_checkpoint(const std::filesystem::path& dir, const CheckpointConfig& config,
                      const std::vector<MoeLayerData>& layers, TensorNaming naming);

}  // namespace mxmoe
