// `mxmoe plan`: the plan of every forward for a named target or the GPU at hand, on any machine (no
// GPU needed with --target): which family and tile, the GEMV split-K, local routing, the combine.
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <optional>

#include "cli_common.hpp"
#include "mxmoe/device.hpp"
#include "mxmoe/error.hpp"
#include "mxmoe/plan_override.hpp"
#include "mxmoe/shard.hpp"
#include "plan/device_caps.hpp"
#include "plan/planner.hpp"

namespace mxmoe::cli {
namespace {

struct PlanOptions {
  std::string target;
  std::string preset = "gpt-oss-120b";
  std::vector<int64_t> tokens = {0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096};
  std::string backend = "auto";
  std::string plan;
  int ep = 1;  // plan rank 0 of an expert-parallel layer over this many ranks
  std::string precision = "bf16";
};

int run_plan(const PlanOptions& o) {
  MoeConfig config = MoeConfig::preset(o.preset);
  plan::PlannerInput in;
  if (o.ep > 1) {
    // Rank 0's experts, as ShardedMoe plans them (ShardSpec's contiguous ranges; each rank needs k).
    if (o.ep > config.num_experts / config.top_k)
      throw UsageError("--ep: at most E / k = " + std::to_string(config.num_experts / config.top_k) +
                       " ranks (each needs k experts), got " + std::to_string(o.ep));
    in.routed_experts = config.num_experts;
    config.num_experts = resolve_shard(config, ShardSpec::expert(0, o.ep)).local.num_experts;
  }
  if (!o.target.empty()) {
    in.caps = plan::target_caps(o.target);
    in.fits = plan::fits_for_caps(in.caps);
  } else {
    MXMOE_REQUIRE(gpu_available(), "--target: no usable GPU here (", probe().no_gpu_reason, "); name a target: ",
                  joined(plan::target_names()));
    in.caps = plan::probe_caps(0);
    in.fits = plan::fits_on_device(0, in.caps);
  }
  in.config = config;
  in.backend = parse_backend(o.backend);
  if (in.backend == Backend::Reference) throw UsageError("--backend: 'reference' has no GPU plan");
  in.force = parse_plan_override(o.plan, "--plan");
  in.precision = parse_precision(o.precision);
  // fp8 for an SM120/SM121 or SM89 target is the MXFP8 path (resolve_backend does the same for a runner).
  if (in.backend == Backend::Auto) in.backend = plan::auto_backend_for(in.precision, in.caps);
  const plan::Planner planner(in);
  const std::string resolved = to_string(in.backend) == o.backend ? "" : " (" + to_string(in.backend) + ")";
  std::cout << "plan: " << describe_shape(config) << ", backend " << o.backend << resolved << ", precision " << o.precision;
  if (o.ep > 1) std::cout << ", expert-parallel rank 0 of " << o.ep << " (of " << in.routed_experts << " experts)";
  std::cout << "\n";
  std::cout << "device: " << plan::describe(in.caps) << (in.caps.is_target ? "" : " (probed)") << "\n";
  for (const std::string& note : planner.notes()) std::cout << "  not a candidate: " << note << "\n";
  for (const int64_t t : o.tokens) std::cout << "T = " << t << ": " << planner.plan(t).to_string() << "\n";
  return kExitOk;
}

}  // namespace

void add_plan_command(CLI::App& app, int& exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "plan", "Print the planner's choice per batch size for a named target (no GPU needed) or the GPU at hand");
  auto o = std::make_shared<PlanOptions>();
  cmd->add_option("--target", o->target, "Target: " + joined(plan::target_names()) + " (default: the GPU at hand)")
      ->check(CLI::IsMember(plan::target_names()));
  cmd->add_option("--preset", o->preset, "Model shape: " + joined(MoeConfig::preset_names()))
      ->capture_default_str()
      ->check(CLI::Validator(validate_preset_name, "PRESET", "preset"));
  cmd->add_option("--tokens", o->tokens, "Batch sizes")
      ->delimiter(',')
      ->capture_default_str()
      ->check(integer_in(0, int64_t{1} << 20));
  cmd->add_option("--precision", o->precision, "Activations: bf16 (W4A16, default) or fp8 (W4A8 on Hopper, MXFP8 on SM89 and SM12x)")
      ->capture_default_str()
      ->check(CLI::IsMember({"bf16", "fp8"}));
  cmd->add_option("--ep", o->ep, "Plan rank 0 of an expert-parallel layer over N ranks (its E / N experts, the "
                               "other ranks' pairs dropped)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--backend", o->backend, "GPU backend: auto, gemv, mma, mx-emulated, mx")
      ->capture_default_str()
      ->check(CLI::Validator(validate_backend_name, "BACKEND", "backend"));
  // The syntax is checked here (exit 2); a value this target cannot run is the planner's error (exit 1).
  cmd->add_option("--plan", o->plan, "Force parts of the plan, as MXMOE_PLAN (e.g. mma=swap32,ksplit=4)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            try {
              parse_plan_override(text, "--plan");
            } catch (const Error& e) {
              const std::string message = e.what();  // "--plan: ...": CLI11 names the option itself
              return message.starts_with("--plan: ") ? message.substr(8) : message;
            }
            return {};
          },
          "KEY=VALUE,...", "plan"));
  cmd->callback([o, &exit_code] { exit_code = run_plan(*o); });
}

}  // namespace mxmoe::cli
