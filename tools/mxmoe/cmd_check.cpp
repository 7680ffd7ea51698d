// `mxmoe check`: random weights and inputs, every available backend against the fp64 reference.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <limits>
#include <memory>
#include <vector>

#include "cli_common.hpp"
#include "mxmoe/device.hpp"
#include "mxmoe/error.hpp"
#include "mxmoe/formats.hpp"
#include "mxmoe/reference.hpp"
#include "mxmoe/runner.hpp"
#include "mxmoe/weights.hpp"
#include "moe/green_context.hpp"
#include "plan/device_caps.hpp"

namespace mxmoe::cli {
namespace {

constexpr double kTolerance = 1e-2;  // bf16-activation paths (ARCHITECTURE.md, Numerics)

struct CheckOptions {
  std::string preset = "tiny";
  int experts = 0, top_k = 0, hidden = 0, intermediate = 0;
  int64_t tokens = 8;
  uint64_t seed = 0;
  std::string backend;
  std::string target;  // run this target's plan on the GPU at hand (RunnerOptions::target)
  CLI::Option* experts_opt = nullptr;
  CLI::Option* seed_opt = nullptr;
  CLI::Option* backend_opt = nullptr;
};

MoeConfig config_from(const CheckOptions& o) {
  if (o.experts_opt->count() == 0) return MoeConfig::preset(o.preset);
  return custom_config(o.experts, o.top_k, o.hidden, o.intermediate);
}

// The backends to check: the one asked for (--backend, else MXMOE_BACKEND), else all available here.
std::vector<Backend> backends_to_check(const CheckOptions& o, const ProbeResult& probe_result) {
  std::optional<Backend> asked;
  if (o.backend_opt->count() > 0) asked = parse_backend(o.backend);
  else asked = backend_from_env();
  // resolve_backend turns Auto into a concrete backend and refuses a GPU backend without a GPU.
  if (asked) return {resolve_backend(RunnerOptions{*asked, o.tokens, false})};

  std::vector<Backend> all{Backend::Reference};
  if (gpu_available() && !probe_result.gpus.empty())
    for (const auto& name : probe_result.gpus[0].runnable_backends) all.push_back(parse_backend(name));
  return all;
}

std::string format_double(const char* format, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, value);
  return buffer;
}

int run_check(const CheckOptions& o) {
  check_environment();
  const MoeConfig config = config_from(o);
  const uint64_t seed = seed_or_random(o.seed_opt->count() > 0 ? std::optional(o.seed) : std::nullopt);
  const ProbeResult probe_result = probe();
  const std::vector<Backend> backends = backends_to_check(o, probe_result);
  MXMOE_REQUIRE(o.target.empty() || gpu_available(), "--target: runs the target's plan on the GPU at hand, and none is ",
                "usable here (", probe_result.no_gpu_reason, "); `mxmoe plan --target ", o.target,
                "` prints its plan on any machine");
  // A target with fewer SMs than this GPU runs in a green context of that many.
  std::unique_ptr<GreenContext> green;
  if (!o.target.empty() && plan::target_caps(o.target).sm_count < probe_result.gpus[0].sm_count)
    green = std::make_unique<GreenContext>(probe_result.gpus[0].index, plan::target_caps(o.target).sm_count);

  std::cout << "check: " << describe_shape(config) << ", " << o.tokens << " tokens, seed " << seed << "\n";
  if (!o.target.empty())
    std::cout << "target: " << o.target << "'s plan on this GPU"
              << (green ? ", on " + std::to_string(green->sm_count()) + " SMs (green context)" : "") << "\n";
  if (!gpu_available()) std::cout << "no GPU: ran the CPU reference only (" << probe_result.no_gpu_reason << ")\n";
  std::cout.flush();

  // Different streams for weights, hidden and logits, all from the one printed seed.
  const MoeLayerData layer = MoeLayerData::random(config, seed);
  const auto t = static_cast<size_t>(o.tokens);
  const std::vector<uint16_t> hidden = random_bf16(t * static_cast<size_t>(config.hidden), seed ^ 0x68696464656e0001ULL);
  const std::vector<float> logits = random_f32(t * static_cast<size_t>(config.num_experts), seed ^ 0x6c6f67697473002ULL);

  std::vector<double> ref(t * static_cast<size_t>(config.hidden));
  const auto start = std::chrono::steady_clock::now();
  reference_moe_f64(config, layer.view(), hidden, logits, o.tokens, ref);
  const double oracle_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  // Each backend is held against the oracle that rounds as it does (ARCHITECTURE.md, Numerics): the
  // MXFP8-activation backends against one that also quantises the activations to MXFP8.
  std::cout << "oracle fp64: the fp64 CPU reference (reference_moe_f64), " << format_double("%.1f", oracle_ms)
            << " ms\n";
  const bool any_mx = std::any_of(backends.begin(), backends.end(), backend_uses_mxfp8);
  if (any_mx)
    std::cout << "oracle fp64-mxfp8: the same, with the activations quantised to MXFP8 before each GEMM as the "
                 "MXFP8 backends do; their error against fp64 follows on the next line (not held to the "
                 "tolerance)\n";
  std::printf("%-12s %-11s %-12s %-12s %-8s %-12s %s\n", "backend", "oracle", "max_abs_err", "rel_err", "tol", "time",
              "result");
  std::fflush(stdout);

  std::vector<double> ref_mx;  // computed once, if an MXFP8 backend runs
  int failures = 0;
  for (Backend backend : backends) {
    const std::string name = to_string(backend);
    const bool mx = backend_uses_mxfp8(backend);
    const char* oracle = mx ? "fp64-mxfp8" : "fp64";
    try {
      RunnerOptions options{backend, o.tokens, false};
      if (backend_on_gpu(backend)) options.target = o.target;
      const MoeRunner runner(config, layer.view(), options);
      const ForwardResult result =
          run_forward(runner, hidden, logits, o.tokens, runner.on_gpu() && green ? green->stream() : nullptr);
      if (mx && ref_mx.empty()) {
        ref_mx.resize(ref.size());
        ReferenceOptions quantising;
        quantising.mxfp8_gemm1_input = quantising.mxfp8_gemm2_input = true;
        reference_moe_f64(config, layer.view(), hidden, logits, o.tokens, ref_mx, quantising);
      }
      const std::vector<double>& held_against = mx ? ref_mx : ref;
      const ErrorStats stats = compare_to_reference(result.out, held_against);
      const bool pass = stats.nan_count == 0 && stats.rel <= kTolerance;
      failures += pass ? 0 : 1;
      std::printf("%-12s %-11s %-12.4e %-12.4e %-8.0e %-12s %s\n", name.c_str(), oracle, stats.max_abs, stats.rel,
                  kTolerance, (format_double("%.2f", result.milliseconds) + " ms").c_str(), pass ? "PASS" : "FAIL");
      if (mx) {
        const ErrorStats plain = compare_to_reference(result.out, ref);
        std::printf("  %s against fp64: max_abs_err %.4e, rel_err %.4e (the MXFP8 rounding of the activations "
                    "included)\n",
                    name.c_str(), plain.max_abs, plain.rel);
      }
      if (!pass && stats.worst_index >= 0) {
        const auto i = static_cast<size_t>(stats.worst_index);
        std::printf("  worst element: token %zu, column %zu: out %.6g, %s %.6g; %lld NaN outputs\n",
                    i / static_cast<size_t>(config.hidden), i % static_cast<size_t>(config.hidden),
                    static_cast<double>(bf16_to_float(result.out[i])), oracle, held_against[i],
                    static_cast<long long>(stats.nan_count));
      }
    } catch (const Error& e) {
      // One backend failing must not hide the others' results.
      ++failures;
      std::printf("%-12s %-11s %-12s %-12s %-8.0e %-12s %s\n", name.c_str(), oracle, "-", "-", kTolerance, "-", "FAIL");
      std::fflush(stdout);
      std::cerr << "error: " << name << ": " << e.what() << "\n";
    }
    std::fflush(stdout);
  }
  std::cout << "check: " << (failures == 0 ? "PASS" : "FAIL") << " (" << backends.size() - failures << " of "
            << backends.size() << " backends within tolerance " << format_double("%.0e", kTolerance)
            << " of their oracle)\n";
  return failures == 0 ? kExitOk : kExitFailure;
}

}  // namespace

void add_check_command(CLI::App& app, int& exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "check",
      "Run each available backend on random weights and inputs and compare with the fp64 CPU reference (the "
      "MXFP8 backends with the same reference quantising the activations to MXFP8, as they do)");
  auto o = std::make_shared<CheckOptions>();
  CLI::Option* preset = cmd->add_option("--preset", o->preset, "Model shape: " + joined(MoeConfig::preset_names()))
                            ->capture_default_str()
                            ->check(CLI::Validator(validate_preset_name, "PRESET", "preset"));
  const CLI::Validator positive_int = integer_in(1, std::numeric_limits<int>::max());
  o->experts_opt = cmd->add_option("--experts", o->experts, "Explicit shape: number of experts E")->check(positive_int);
  CLI::Option* top_k = cmd->add_option("--top-k", o->top_k, "Explicit shape: experts per token k")->check(positive_int);
  CLI::Option* hidden =
      cmd->add_option("--hidden", o->hidden, "Explicit shape: hidden size H (multiple of 32)")->check(positive_int);
  CLI::Option* intermediate =
      cmd->add_option("--intermediate", o->intermediate, "Explicit shape: intermediate size I (multiple of 32)")
          ->check(positive_int);
  // The explicit shape comes whole, and replaces --preset.
  const std::vector<CLI::Option*> shape{o->experts_opt, top_k, hidden, intermediate};
  for (CLI::Option* a : shape) {
    a->excludes(preset);
    for (CLI::Option* b : shape)
      if (a != b) a->needs(b);
  }
  cmd->add_option("--tokens", o->tokens, "Tokens T (0 is valid)")
      ->capture_default_str()
      ->check(integer_in(0, int64_t{1} << 20));
  o->seed_opt = cmd->add_option("--seed", o->seed, "Random seed (default: a fresh one, printed)")->check(seed_value());
  o->backend_opt = cmd->add_option("--backend", o->backend,
                                   "Backend: " + joined(backend_names()) + " (default: all available here)")
                       ->check(CLI::Validator(validate_backend_name, "BACKEND", "backend"));
  cmd->add_option("--target", o->target,
                  "Run this target's plan on the GPU at hand (on its SM count where that is fewer): " +
                      joined(plan::target_names()))
      ->check(CLI::IsMember(plan::target_names()));
  cmd->callback([o, &exit_code] { exit_code = run_check(*o); });
}

}  // namespace mxmoe::cli
