// `mxmoe bench`: time one MoE layer per batch size with CUDA events around graph replays, weights
// rotated across enough layers that the L2 cache cannot flatter the figure, against ceilings
// (copy bandwidth, cuBLAS bf16 GEMM rate) measured on the same device at start.
// The pieces live beside it: bench_timing (graph replays), bench_ceilings, bench_record (the record's
// metadata) and bench_tune (--tune).
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "bench_ceilings.hpp"
#include "bench_record.hpp"
#include "bench_timing.hpp"
#include "bench_tune.hpp"
#include "cli_common.hpp"
#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "gpu_monitor.hpp"
#include "moe/green_context.hpp"
#include "plan/device_caps.hpp"
#include "mxmoe/mxmoe.hpp"

namespace mxmoe::cli {
namespace {

using DevBuf = ::mxmoe::DeviceBuffer;

struct BenchOptions {
  std::string preset = "gpt-oss-120b";
  int experts = 0, top_k = 0, hidden = 0, intermediate = 0;
  std::vector<int64_t> tokens = {1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096};
  std::string backend = "auto";
  std::string precision = "bf16";
  std::string target;  // plan for this target and run its plan here (RunnerOptions::target)
  int iterations = 60, warmup = 10;
  // Replays before timing for at least this long: an H100 at gpt-oss-120b's T = 1024 reaches its power
  // cap about 0.6 s into a run and then lowers its clock, so a short warm-up times a cool chip.
  double warmup_ms = 2000;
  int layers = 0;  // 0: enough to exceed 4x the L2 cache with the experts one batch touches
  std::string json_path;
  std::string tune_path;  // --tune: measure the families and tiles per T and write the planner's table
  uint64_t seed = 1234;
  bool stages = false;
};

int run_bench(const BenchOptions& o) {
  const ProbeResult pr = probe();
  MXMOE_REQUIRE(pr.no_gpu_reason.empty(), "bench: needs a CUDA GPU (", pr.no_gpu_reason, ")");
  const GpuInfo& gpu = pr.gpus[0];
  const MoeConfig cfg =
      o.experts ? custom_config(o.experts, o.top_k, o.hidden, o.intermediate) : MoeConfig::preset(o.preset);
  RunnerOptions ropt;
  ropt.backend = parse_backend(o.backend);
  ropt.precision = parse_precision(o.precision);
  ropt.max_tokens = *std::max_element(o.tokens.begin(), o.tokens.end());
  ropt.target = o.target;

  cudaStream_t own_stream;
  MXMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&own_stream, cudaStreamNonBlocking));
  cudaStream_t stream = own_stream;
  // A target with fewer SMs than this GPU runs everything, the ceilings too, on that many SMs.
  std::unique_ptr<GreenContext> green;
  if (!o.target.empty() && plan::target_caps(o.target).sm_count < gpu.sm_count) {
    green = std::make_unique<GreenContext>(gpu.index, plan::target_caps(o.target).sm_count);
    stream = green->stream();
    std::cerr << "target " << o.target << ": kernels confined to " << green->sm_count() << " of " << gpu.sm_count
              << " SMs (green context)\n";
  }
  std::cerr << "measuring ceilings (copy bandwidth, cuBLAS bf16 GEMM)...\n";
  GpuMonitor monitor(gpu.index);
  if (!monitor.available()) std::cerr << "no clock and power samples: " << monitor.why_unavailable() << "\n";
  const bench::Ceiling copy = bench::measure_copy(stream, gpu.sm_count, o.warmup_ms, monitor);
  const bench::Ceiling bf16 = bench::measure_bf16(stream, o.warmup_ms, monitor);
  const double copy_gbps = copy.rate, bf16_tflops = bf16.rate;

  // Bytes one expert streams: MXFP4 blocks + e8m0 scales of both GEMMs (biases are noise).
  const double h = cfg.hidden, i = cfg.intermediate;
  const double expert_bytes = (2 * i * h / 2 + 2 * i * h / 32) + (h * i / 2 + h * i / 32);
  int layers = o.layers;
  if (layers <= 0) {
    const double touched_min = expert_bytes * std::min(cfg.top_k, cfg.num_experts);
    layers = static_cast<int>(std::ceil(4.0 * gpu.l2_bytes / touched_min));
    layers = std::clamp(layers, 2, 64);
    const double layer_bytes = expert_bytes * cfg.num_experts;
    const int fit = static_cast<int>(0.6 * gpu.total_memory / layer_bytes);
    layers = std::max(1, std::min(layers, fit));
  }
  std::cerr << "model " << cfg.name << ": " << layers << " layers rotated; uploading weights...\n";
  const MoeLayerData host = MoeLayerData::random(cfg, o.seed);
  std::vector<MoeRunner> runners;
  for (int l = 0; l < layers; ++l) {
    runners.emplace_back(cfg, host.view(), ropt);
    bench::progress(l + 1, layers, "layers uploaded");
  }
  MXMOE_REQUIRE(runners[0].on_gpu(), "bench: backend '", to_string(runners[0].backend()), "' does not run on the GPU");

  const int64_t t_max = ropt.max_tokens;
  DevBuf d_hidden(static_cast<size_t>(t_max * cfg.hidden) * 2), d_out(static_cast<size_t>(t_max * cfg.hidden) * 2);
  DevBuf d_ws(runners[0].workspace_bytes());
  const auto hidden = random_bf16(static_cast<size_t>(t_max * cfg.hidden), o.seed + 1);
  MXMOE_CUDA_CHECK(cudaMemcpy(d_hidden.get(), hidden.data(), hidden.size() * 2, cudaMemcpyHostToDevice));
  std::vector<std::vector<float>> logits(layers);
  std::vector<DevBuf> d_logits;
  for (int l = 0; l < layers; ++l) {
    logits[l] = random_f32(static_cast<size_t>(t_max * cfg.num_experts), o.seed + 100 + l, 2.0);
    d_logits.emplace_back(logits[l].data(), logits[l].size() * 4);
  }

  nlohmann::ordered_json record;
  record["device"] = gpu.name;
  record["compute_capability"] = std::to_string(gpu.cc_major) + "." + std::to_string(gpu.cc_minor);
  record["code_arch"] = gpu.code_arch;  // the code it ran: 90 for sm_90a, 80 for compute_80 PTX through the JIT
  record["driver"] = bench::driver_string().empty() ? std::to_string(pr.driver_version) : bench::driver_string();
  record["cuda_driver_api"] = pr.driver_version;
  record["runtime"] = pr.runtime_version;
  record["commit"] = bench::commit_id();
  record["date"] = bench::utc_now();
  record["model"] = cfg.name;
  record["shape"] = {{"experts", cfg.num_experts}, {"top_k", cfg.top_k}, {"hidden", cfg.hidden},
                     {"intermediate", cfg.intermediate}};
  record["backend"] = to_string(runners[0].backend());
  record["precision"] = to_string(runners[0].precision());
  if (!o.target.empty()) {
    record["target"] = o.target;
    record["green_context_sms"] = green ? green->sm_count() : 0;  // 0: all of this GPU's SMs
  }
  record["layers_rotated"] = layers;
  record["l2_bytes"] = gpu.l2_bytes;
  record["iterations"] = o.iterations;
  record["warmup_ms"] = o.warmup_ms;
  record["copy_gbps"] = copy_gbps;
  record["bf16_tflops"] = bf16_tflops;
  record["sm_clock_max_mhz"] = monitor.max_sm_mhz();
  record["ceilings_gpu"] = {{"copy", bench::gpu_json(copy.gpu)}, {"bf16", bench::gpu_json(bf16.gpu)}};
  record["rows"] = nlohmann::json::array();

  std::ostringstream table;
  table << "device " << gpu.name
        << (gpu.code_arch == gpu.cc_major * 10 + gpu.cc_minor ? "" : " running sm_" + std::to_string(gpu.code_arch) + " code")
        << " | copy " << std::fixed << std::setprecision(0) << copy_gbps << " GB/s"
        << bench::clock_note(copy.gpu) << " | bf16 " << bf16_tflops << " TFLOP/s" << bench::clock_note(bf16.gpu)
        << " | " << cfg.name << " | precision " << to_string(runners[0].precision()) << " | " << layers
        << " layers rotated | warm-up " << o.warmup_ms << " ms";
  if (!o.target.empty())
    table << " | plan of target " << o.target << (green ? " on " + std::to_string(green->sm_count()) + " SMs" : "");
  table << "\n";
  table << std::setw(6) << "T" << std::setw(11) << "us/layer" << std::setw(9) << "experts" << std::setw(10) << "GB/s"
        << std::setw(8) << "%copy" << std::setw(9) << "TFLOP/s" << std::setw(8) << "%bf16" << std::setw(7) << "MHz"
        << std::setw(5) << "W" << "  backend / plan\n";
  bool any_limited = false;
  size_t done = 0;
  const bench::WarmUp warmup{o.warmup, o.warmup_ms};
  for (const int64_t t : o.tokens) {
    const bench::Timing timing = bench::time_graph(stream, warmup, o.iterations, monitor, [&] {
      for (int l = 0; l < layers; ++l)
        runners[l].forward(d_hidden.get<uint16_t>(), d_logits[l].get<float>(), t, d_out.get<uint16_t>(), d_ws.get(),
                           d_ws.bytes(), stream);
    });
    const double ms = timing.ms;
    const double us = ms * 1e3 / layers;
    // Per-stage times: graphs of the first n stages, differences of their medians.
    std::vector<double> stage_us;
    if (o.stages) {
      double before = 0;
      for (int n = 1; n <= MoeRunner::kAllStages; ++n) {
        const double stage_ms =
            n == MoeRunner::kAllStages ? ms : bench::time_graph(stream, warmup, o.iterations, monitor, [&] {
              for (int l = 0; l < layers; ++l)
                runners[l].forward_stages(d_hidden.get<uint16_t>(), d_logits[l].get<float>(), t,
                                          d_out.get<uint16_t>(), d_ws.get(), d_ws.bytes(), stream, n);
            }).ms;
        const double cumulative = stage_ms * 1e3 / layers;
        stage_us.push_back(cumulative - before);
        before = cumulative;
      }
    }
    // Experts touched, averaged over the rotated layers (routing computed on the host, same logits).
    double touched = 0;
    std::vector<int32_t> ids(static_cast<size_t>(t * cfg.top_k));
    std::vector<float> w(ids.size());
    for (int l = 0; l < layers; ++l) {
      reference_route(cfg, std::span(logits[l]).first(static_cast<size_t>(t * cfg.num_experts)), t, ids, w);
      touched += static_cast<double>(std::set<int32_t>(ids.begin(), ids.end()).size());
    }
    touched /= layers;
    const double gbps = touched * expert_bytes / (us * 1e-6) / 1e9;
    const double flops = 2.0 * t * cfg.top_k * (h * 2 * i + i * h);
    const double tflops = flops / (us * 1e-6) / 1e12;
    const std::string plan = runners[0].describe_plan(t);
    nlohmann::ordered_json row;
    row["tokens"] = t;
    row["us"] = us;
    row["experts_touched"] = touched;
    row["weight_gbps"] = gbps;
    row["pct_copy_bw"] = 100.0 * gbps / copy_gbps;
    row["tflops"] = tflops;
    row["pct_bf16_peak"] = 100.0 * tflops / bf16_tflops;
    row["memory_floor_us"] = touched * expert_bytes / (copy_gbps * 1e9) * 1e6;
    row["backend"] = to_string(runners[0].backend());
    row["tile"] = plan;
    row["gpu"] = bench::gpu_json(timing.gpu);
    if (o.stages)
      row["stages_us"] = {{"route", stage_us[0]}, {"gemm1", stage_us[1]}, {"gemm2", stage_us[2]}, {"combine", stage_us[3]}};
    record["rows"].push_back(row);
    table << std::setw(6) << t << std::setw(11) << std::setprecision(1) << us << std::setw(9) << touched
          << std::setw(10) << std::setprecision(0) << gbps << std::setw(7) << std::setprecision(1)
          << 100.0 * gbps / copy_gbps << "%" << std::setw(9) << std::setprecision(1) << tflops << std::setw(7)
          << 100.0 * tflops / bf16_tflops << "%";
    if (timing.gpu.samples > 0) {
      const bool limited = timing.gpu.limited_fraction > 0;
      any_limited |= limited;
      table << std::setw(6) << std::setprecision(0) << timing.gpu.sm_mhz_median << (limited ? "*" : " ") << std::setw(5)
            << timing.gpu.power_w_median;
    } else {
      table << std::setw(7) << "-" << std::setw(5) << "-";
    }
    table << "  " << plan << "\n";
    if (o.stages)
      table << "        stages us: route " << std::setprecision(1) << stage_us[0] << ", gemm1 " << stage_us[1]
            << ", gemm2 " << stage_us[2] << ", combine " << stage_us[3] << "\n";
    bench::progress(++done, o.tokens.size(), "batch sizes");
  }
  if (any_limited) table << "* the power or thermal limit lowered the SM clock during the timed replays\n";
  std::cout << table.str();
  if (!o.json_path.empty()) {
    std::ofstream f(o.json_path);
    MXMOE_REQUIRE(f.good(), "--json: cannot write '", o.json_path, "'");
    f << record.dump(2) << "\n";
    std::cout << "wrote " << o.json_path << "\n";
  }
  if (!o.tune_path.empty()) {
    runners.clear();  // the candidates below need the device memory
    bench::write_tune_table({o.tune_path, o.tokens, warmup, o.iterations}, cfg, gpu, host, layers,
                            d_hidden, d_out, d_logits, stream, monitor);
  }
  cudaStreamDestroy(own_stream);
  return kExitOk;
}

}  // namespace

void add_bench_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "Time the MoE layer on the GPU per batch size (graph replay, L2 rotated)");
  cmd->add_option("--preset", o->preset, "Model preset: " + joined(MoeConfig::preset_names()))
      ->capture_default_str()
      ->check(CLI::Validator(validate_preset_name, "PRESET", "preset"));
  const CLI::Validator positive_int = integer_in(1, std::numeric_limits<int>::max());
  cmd->add_option("--experts", o->experts, "Explicit shape: experts E (with --top-k --hidden --intermediate)")
      ->check(positive_int);
  cmd->add_option("--top-k", o->top_k, "Explicit shape: top-k")->check(positive_int);
  cmd->add_option("--hidden", o->hidden, "Explicit shape: hidden H")->check(positive_int);
  cmd->add_option("--intermediate", o->intermediate, "Explicit shape: intermediate I")->check(positive_int);
  cmd->add_option("--tokens", o->tokens, "Batch sizes to time")
      ->delimiter(',')
      ->capture_default_str()
      ->check(integer_in(1, int64_t{1} << 20));
  cmd->add_option("--backend", o->backend, "Backend: " + joined(backend_names()))
      ->capture_default_str()
      ->check(CLI::Validator(validate_backend_name, "BACKEND", "backend"));
  cmd->add_option("--precision", o->precision, "Activations: bf16 (W4A16, default) or fp8 (W4A8 on Hopper, MXFP8 on SM89 and SM12x)")
      ->capture_default_str()
      ->check(CLI::IsMember({"bf16", "fp8"}));
  cmd->add_option("--target", o->target,
                  "Plan for this target and run its plan on this GPU (on its SM count where that is fewer): " +
                      joined(plan::target_names()))
      ->check(CLI::IsMember(plan::target_names()));
  cmd->add_option("--iterations", o->iterations, "Timed graph replays per batch (median)")->check(CLI::Range(50, 100000))->capture_default_str();
  cmd->add_option("--warmup", o->warmup, "Untimed replays first (at least)")
      ->check(integer_in(0, 1000000))
      ->capture_default_str();
  cmd->add_option("--warmup-ms", o->warmup_ms,
                  "Untimed replays first for at least this long, so clocks and power settle as in sustained use")
      ->check(CLI::Range(0.0, 60000.0))
      ->capture_default_str();
  cmd->add_option("--layers", o->layers, "Layers to rotate (0: enough to exceed 4x L2)")
      ->check(integer_in(0, 4096))
      ->capture_default_str();
  cmd->add_option("--json", o->json_path, "Write the benchmark record (bench/README.md) to this file");
  cmd->add_flag("--stages", o->stages, "Also time each stage (route, gemm1, gemm2, combine)");
  cmd->add_option("--tune", o->tune_path,
                  "Also time every kernel family and tile per batch size and write the planner's preference "
                  "table to this file (read by the runner from MXMOE_TUNE_FILE); each timing warms up for "
                  "--warmup-ms, so a shorter warm-up shortens the run");
  cmd->add_option("--seed", o->seed, "Seed of the random weights and inputs")->check(seed_value())->capture_default_str();
  cmd->callback([o, &exit_code] {
    // Usage errors before the GPU is looked for.
    check_environment();
    if (o->experts != 0 && !(o->top_k > 0 && o->hidden > 0 && o->intermediate > 0))
      throw UsageError("--experts needs --top-k, --hidden and --intermediate too");
    if (o->experts == 0 && (o->top_k != 0 || o->hidden != 0 || o->intermediate != 0))
      throw UsageError("--top-k, --hidden and --intermediate need --experts: an explicit shape comes whole (a --preset's "
                       "shape cannot be changed in part)");
    if (o->experts != 0) custom_config(o->experts, o->top_k, o->hidden, o->intermediate);
    // The tune table selects among the W4A16 families; the W4A8 tiles are forced by MXMOE_PLAN=mma=fp8wgmmaN.
    if (!o->tune_path.empty() && o->precision == "fp8")
      throw UsageError("--tune: times the bf16 (W4A16) families; run it without --precision fp8");
    exit_code = run_bench(*o);
  });
}

}  // namespace mxmoe::cli
