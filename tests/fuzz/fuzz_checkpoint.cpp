// libFuzzer target: the checkpoint reader treats every byte of a file as hostile (ARCHITECTURE.md,
// Errors). Byte 0 of an input picks what the rest is:
//   0: a .safetensors file: open it and read every tensor it lists;
//   1: a config.json: read_checkpoint_config;
//   2: the model.safetensors of a checkpoint directory whose config.json is fixed (E = 2, k = 1,
//      H = I = 32, one layer, Hugging Face names): Checkpoint(dir).load_layer(0).
// Any outcome but success or an mxmoe::Error is a finding (a crash, a sanitizer report, another
// exception, a hang). Built and run by scripts/fuzz.sh with the seeds in tests/fuzz/corpus/.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "mxmoe/checkpoint.hpp"
#include "mxmoe/error.hpp"

namespace {

const std::filesystem::path& work_dir() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("mxmoe_fuzz_" + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    std::ofstream(d / "config.json") << R"({"num_hidden_layers": 1, "num_local_experts": 2,
      "num_experts_per_tok": 1, "hidden_size": 32, "intermediate_size": 32, "swiglu_limit": 7.0,
      "quantization_config": {"quant_method": "mxfp4"}})";
    return d;
  }();
  return dir;
}

void write_file(const std::filesystem::path& path, const uint8_t* data, size_t size) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0] % 3;
  const auto& dir = work_dir();
  try {
    if (mode == 0) {
      const auto path = dir / "alone.safetensors";
      write_file(path, data + 1, size - 1);
      const mxmoe::SafetensorsFile file(path);
      for (const auto& [name, info] : file.tensors()) (void)file.read(name);
    } else if (mode == 1) {
      const auto path = dir / "alone_config.json";
      write_file(path, data + 1, size - 1);
      (void)mxmoe::read_checkpoint_config(path);
    } else {
      write_file(dir / "model.safetensors", data + 1, size - 1);
      const mxmoe::Checkpoint ckpt(dir);
      (void)ckpt.load_layer(0);
    }
  } catch (const mxmoe::Error&) {
    // rejected with a message: the expected outcome for bad input
  }
  return 0;
}
