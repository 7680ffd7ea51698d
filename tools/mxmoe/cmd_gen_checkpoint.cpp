// `mxmoe gen-checkpoint`: a gpt-oss-format checkpoint of random, checkpoint-like layers, for tests
// and for machines without the real weights.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli_common.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/error.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe::cli {
namespace {

struct GenOptions {
  std::string preset;
  int layers = 1;
  std::string out;
  std::string naming = "hf";
  uint64_t seed = 0;
  bool force = false;
  CLI::Option* seed_opt = nullptr;
};

// --out must be a new or empty folder unless --force: writing into a real model's folder would replace
// its config.json.
void check_out_dir(const std::string& out, bool force) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(out, ec)) return;
  if (!fs::is_directory(out, ec)) throw UsageError("--out: '" + out + "' exists and is not a directory");
  if (force) return;
  size_t entries = 0;
  for (auto it = fs::directory_iterator(out, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) ++entries;
  if (ec) throw UsageError("--out: cannot list '" + out + "': " + ec.message());
  if (entries > 0)
    throw UsageError("--out: '" + out + "' is not empty (" + std::to_string(entries) +
                     " entries); give a new or empty directory, or --force to write config.json and "
                     "model.safetensors into it");
}

int run_gen_checkpoint(const GenOptions& o) {
  check_out_dir(o.out, o.force);
  CheckpointConfig config;
  config.moe = MoeConfig::preset(o.preset);
  config.num_layers = o.layers;
  config.quant_method = "mxfp4";
  const TensorNaming naming = o.naming == "original" ? TensorNaming::Original : TensorNaming::HuggingFace;
  const uint64_t seed = seed_or_random(o.seed_opt->count() > 0 ? std::optional(o.seed) : std::nullopt);

  std::vector<MoeLayerData> layers;
  layers.reserve(static_cast<size_t>(o.layers));
  for (int n = 0; n < o.layers; ++n) layers.push_back(MoeLayerData::random(config.moe, seed + static_cast<uint64_t>(n)));

  std::error_code ec;
  std::filesystem::create_directories(o.out, ec);
  MXMOE_REQUIRE(!ec, "--out: cannot create directory '", o.out, "': ", ec.message());
  write_checkpoint(o.out, config, layers, naming);
  std::cout << "gen-checkpoint: wrote " << o.layers << " layer(s) of " << describe_shape(config.moe) << ", "
            << to_string(naming) << " tensor names, seed " << seed << ", to " << o.out << "\n";
  return kExitOk;
}

}  // namespace

void add_gen_checkpoint_command(CLI::App& app, int& exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "gen-checkpoint", "Write a gpt-oss-format MXFP4 checkpoint (config.json + model.safetensors) of random layers");
  auto o = std::make_shared<GenOptions>();
  cmd->add_option("--preset", o->preset, "Model shape: " + joined(MoeConfig::preset_names()))
      ->required()
      ->check(CLI::Validator(validate_preset_name, "PRESET", "preset"));
  cmd->add_option("--layers", o->layers, "Number of layers")->required()->check(integer_in(1, 1024));
  cmd->add_option("--out", o->out, "Output directory: new or empty (created if missing)")->required();
  cmd->add_flag("--force", o->force,
                "Write into a non-empty --out, replacing its config.json and model.safetensors (other files stay)");
  cmd->add_option("--naming", o->naming, "Tensor names: hf (Hugging Face) or original")
      ->capture_default_str()
      ->check(CLI::IsMember({"hf", "original"}));
  o->seed_opt = cmd->add_option("--seed", o->seed, "Random seed; layer n uses seed + n (default: a fresh one, printed)")
                    ->check(seed_value());
  cmd->callback([o, &exit_code] { exit_code = run_gen_checkpoint(*o); });
}

}  // namespace mxmoe::cli
