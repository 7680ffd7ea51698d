#pragma once
// config.json writing, shared by write_checkpoint (reading is public: read_checkpoint_config).
#include <filesystem>

#include "mxmoe/checkpoint.hpp"

namespace mxmoe::checkpoint_detail {

// Hugging Face keys for HuggingFace naming; the original release's keys (plus quantization_config)
// for Original naming.
void write_checkpoint_config(const std::filesystem::path& config_json, const CheckpointConfig& config,
                             TensorNaming naming);

}  // namespace mxmoe::checkpoint_detail
