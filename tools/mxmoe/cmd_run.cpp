// `mxmoe run`: one layer of a checkpoint on one backend, from random or given hidden states.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "cli_common.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/error.hpp"
#include "mxmoe/formats.hpp"
#include "mxmoe/reference.hpp"
#include "mxmoe/runner.hpp"

namespace mxmoe::cli {
namespace {

struct RunOptions {
  std::string checkpoint;
  int layer = 0;
  int64_t tokens = 8;
  uint64_t seed = 0;
  std::string input, output, backend;
  std::string precision = "bf16";
  CLI::Option* tokens_opt = nullptr;
  CLI::Option* seed_opt = nullptr;
  CLI::Option* input_opt = nullptr;
  CLI::Option* output_opt = nullptr;
  CLI::Option* backend_opt = nullptr;
};

// FNV-1a over the output's bits: equal checksums mean bit-identical outputs.
uint64_t fnv1a(std::span<const uint16_t> values) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (uint16_t v : values)
    for (int b = 0; b < 2; ++b) {
      hash ^= (v >> (8 * b)) & 0xFF;
      hash *= 0x100000001b3ULL;
    }
  return hash;
}

int run_run(const RunOptions& o) {
  // What was typed is checked before the checkpoint is read and the forward runs.
  check_environment();
  if (o.output_opt->count() > 0) check_output_path(o.output);
  const Checkpoint checkpoint(o.checkpoint);
  const MoeConfig& config = checkpoint.config().moe;
  const int num_layers = checkpoint.config().num_layers;
  if (o.layer >= num_layers)
    throw UsageError("--layer: " + std::to_string(o.layer) + " is out of range; the checkpoint has " +
                     std::to_string(num_layers) + " layers (0.." + std::to_string(num_layers - 1) + ")");
  const MoeLayerData layer = checkpoint.load_layer(o.layer);
  MXMOE_REQUIRE(!layer.router_weight.empty(), "layer ", o.layer, ": the checkpoint has no router weight");
  const auto h = static_cast<size_t>(config.hidden);

  // Hidden states: a raw bf16 file (its size fixes or must match --tokens), or random N(0, 1).
  std::vector<uint16_t> hidden;
  int64_t tokens = o.tokens;
  std::string input_text;
  if (o.input_opt->count() > 0) {
    hidden = read_bf16_file(o.input);
    // A size that does not fit the layer is a usage error: the file given is not this layer's input.
    if (o.tokens_opt->count() == 0) {
      if (hidden.size() % h != 0)
        throw UsageError("--input: '" + o.input + "' holds " + std::to_string(hidden.size()) +
                         " bf16 values; expected a multiple of hidden = " + std::to_string(h) + " (tokens x hidden)");
      tokens = static_cast<int64_t>(hidden.size() / h);
    }
    if (hidden.size() != static_cast<size_t>(tokens) * h)
      throw UsageError("--input: '" + o.input + "' holds " + std::to_string(hidden.size()) +
                       " bf16 values; expected tokens x hidden = " + std::to_string(tokens) + " x " +
                       std::to_string(h) + " = " + std::to_string(static_cast<size_t>(tokens) * h));
    input_text = o.input;
  } else {
    const uint64_t seed = seed_or_random(o.seed_opt->count() > 0 ? std::optional(o.seed) : std::nullopt);
    hidden = random_bf16(static_cast<size_t>(tokens) * h, seed);
    input_text = "random bf16 N(0, 1), seed " + std::to_string(seed);
  }

  std::vector<float> logits(static_cast<size_t>(tokens) * static_cast<size_t>(config.num_experts));
  reference_router_logits(config, hidden, tokens, layer.router_weight, layer.router_bias, logits);

  // An explicit --backend wins over MXMOE_BACKEND; without it the environment may choose.
  const Backend backend = o.backend_opt->count() > 0 ? parse_backend(o.backend) : Backend::Auto;
  RunnerOptions options{backend, tokens, o.backend_opt->count() == 0};
  options.precision = parse_precision(o.precision);
  const MoeRunner runner(config, layer.view(), options);
  const ForwardResult result = run_forward(runner, hidden, logits, tokens);

  std::cout << "checkpoint: " << o.checkpoint << " (" << to_string(checkpoint.naming()) << " tensor names, "
            << num_layers << " layers), layer " << o.layer << "\n";
  std::cout << "shape: " << tokens << " tokens, " << describe_shape(config) << "\n";
  std::cout << "input: " << input_text << "\n";
  std::cout << "backend: " << to_string(runner.backend()) << ", precision " << to_string(runner.precision()) << "\n";
  std::cout << "plan: " << runner.describe_plan(tokens) << "\n";
  std::printf("time: %.3f ms (one forward, wall clock)\n", result.milliseconds);

  double sum = 0, sum_abs = 0;
  for (uint16_t v : result.out) {
    const double x = bf16_to_float(v);
    sum += x;
    sum_abs += std::abs(x);
  }
  std::printf("output: [%lld, %zu] bf16, sum %.6g, mean |x| %.6g, fnv1a %016llx\n", static_cast<long long>(tokens), h,
              sum, result.out.empty() ? 0.0 : sum_abs / static_cast<double>(result.out.size()),
              static_cast<unsigned long long>(fnv1a(result.out)));
  std::printf("first values:");
  for (size_t i = 0; i < std::min<size_t>(8, result.out.size()); ++i)
    std::printf(" %.6g", static_cast<double>(bf16_to_float(result.out[i])));
  std::printf("\n");
  std::fflush(stdout);

  if (o.output_opt->count() > 0) {
    write_bf16_file(o.output, result.out);
    std::cout << "wrote: " << o.output << " (" << result.out.size() * sizeof(uint16_t) << " bytes, raw bf16)\n";
  }
  const size_t nan_count = count_nan_bf16(result.out);
  MXMOE_REQUIRE(nan_count == 0, "output: ", nan_count, " of ", result.out.size(), " values are NaN (backend ",
                to_string(runner.backend()), ")");
  return kExitOk;
}

}  // namespace

void add_run_command(CLI::App& app, int& exit_code) {
  CLI::App* cmd = app.add_subcommand("run", "Run one MoE layer of a checkpoint on one backend");
  auto o = std::make_shared<RunOptions>();
  cmd->add_option("--checkpoint", o->checkpoint, "Checkpoint directory (config.json + *.safetensors)")->required();
  cmd->add_option("--layer", o->layer, "Layer index")
      ->required()
      ->check(integer_in(0, std::numeric_limits<int>::max()));
  o->tokens_opt = cmd->add_option("--tokens", o->tokens, "Tokens T (default 8, or from the size of --input; 0 is valid)")
                      ->check(integer_in(0, int64_t{1} << 20));
  o->seed_opt = cmd->add_option("--seed", o->seed, "Seed of the random hidden states (default: a fresh one, printed)")
                    ->check(seed_value());
  o->input_opt = cmd->add_option("--input", o->input, "Hidden states: raw bf16 [T, H] (little-endian)")
                     ->check(CLI::ExistingFile);
  o->output_opt = cmd->add_option("--output", o->output, "Write the output as raw bf16 [T, H] (checked before the run)");
  o->input_opt->excludes(o->seed_opt);
  o->backend_opt = cmd->add_option("--backend", o->backend,
                                   "Backend: " + joined(backend_names()) + " (default: MXMOE_BACKEND, else auto)")
                       ->check(CLI::Validator(validate_backend_name, "BACKEND", "backend"));
  cmd->add_option("--precision", o->precision, "Activations: bf16 (W4A16, default) or fp8 (W4A8 on Hopper, MXFP8 on SM89 and SM12x)")
      ->capture_default_str()
      ->check(CLI::IsMember({"bf16", "fp8"}));
  cmd->callback([o, &exit_code] { exit_code = run_run(*o); });
}

}  // namespace mxmoe::cli
