#pragma once
// config.json writing, shared by write_checkpoint (reading is public: read_checkpoint_config).
#include <filesystem>

#include "mxmoe/checkpoint.hpp"

namespace mxmoe::checkpoint_detail {

// Hugging Face keys (with quantization_config) for HuggingFace naming; for Original naming, only keys of
// the original release, which OpenAI's ModelConfig accepts.
void write_checkpoint_config(const std::filesystem::path& config_json, const CheckpointConfig& config,
                             TensorNaming naming);

}  // namespace mxmoe::checkpoint_detail
