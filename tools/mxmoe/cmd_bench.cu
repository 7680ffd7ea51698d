// `mxmoe bench`: time one MoE layer per batch size with CUDA events around graph replays, weights
// rotated across enough layers that the L2 cache cannot flatter the figure, against ceilings
// (copy bandwidth, cuBLAS bf16 GEMM rate) measured on the same device at start.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "cli_common.hpp"
#include "common/cuda_check.hpp"
#include "kernels/gemv/gemv.hpp"
#include "kernels/mma/mma_gemm.hpp"
#include "kernels/sm90/wgmma_gemm.hpp"
#include "common/device_buffer.hpp"
#include "gpu_monitor.hpp"
#include "moe/green_context.hpp"
#include "plan/device_caps.hpp"
#include "plan/tile_rows.hpp"
#include "plan/tune_table.hpp"
#include "mxmoe/mxmoe.hpp"

#ifndef MXMOE_GIT_COMMIT
#define MXMOE_GIT_COMMIT "unknown"
#endif

namespace mxmoe::cli {
namespace {

using DevBuf = ::mxmoe::DeviceBuffer;

struct BenchOptions {
  std::string preset = "gpt-oss-120b";
  int experts = 0, top_k = 0, hidden = 0, intermediate = 0;
  std::vector<int64_t> tokens = {1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096};
  std::string backend = "auto";
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

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct WarmUp {
  int replays = 0;  // at least this many
  double ms = 0;    // and for at least this long
};

struct Timing {
  double ms = 0;          // median replay
  GpuSampleSummary gpu;   // the clocks and power of the timed replays
};

// Times `body` (enqueued on `stream`) captured in a graph: median over `iterations` replays, ms. The
// warm-up replays are synchronised one by one as the timed ones are, so the chip warms up under the
// same duty cycle that is then timed.
template <class Body>
Timing time_graph(cudaStream_t stream, WarmUp warmup, int iterations, GpuMonitor& monitor, Body&& body) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  MXMOE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  body();
  MXMOE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  MXMOE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t start, stop;
  MXMOE_CUDA_CHECK(cudaEventCreate(&start));
  MXMOE_CUDA_CHECK(cudaEventCreate(&stop));
  const auto warm_start = std::chrono::steady_clock::now();
  for (int i = 0; i < warmup.replays ||
                  std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - warm_start).count() <
                      warmup.ms;
       ++i) {
    MXMOE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    MXMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  monitor.start();
  std::vector<double> times;
  for (int i = 0; i < iterations; ++i) {
    MXMOE_CUDA_CHECK(cudaEventRecord(start, stream));
    MXMOE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    MXMOE_CUDA_CHECK(cudaEventRecord(stop, stream));
    MXMOE_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    MXMOE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  Timing timing{median(times), monitor.stop()};
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return timing;
}

__global__ void copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    dst[i] = src[i];
}

// The record's "gpu" object of a timed phase (bench/README.md); null without samples.
nlohmann::ordered_json gpu_json(const GpuSampleSummary& g) {
  if (g.samples == 0) return nullptr;
  nlohmann::ordered_json j;
  j["samples"] = g.samples;
  j["sm_clock_mhz"] = g.sm_mhz_median;
  j["sm_clock_min_mhz"] = g.sm_mhz_min;
  j["power_w"] = g.power_w_median;
  j["limited_fraction"] = g.limited_fraction;
  j["reasons"] = clock_reason_names(g.reasons_seen);
  return j;
}

// " at 1755 MHz, sw_power_cap in 80% of samples" for the table's header line.
std::string clock_note(const GpuSampleSummary& g) {
  if (g.samples == 0) return "";
  std::ostringstream out;
  out << " at " << std::fixed << std::setprecision(0) << g.sm_mhz_median << " MHz";
  if (g.limited_fraction > 0)
    out << ", " << clock_reason_names(g.reasons_seen & kClockLimitReasons) << " in " << 100 * g.limited_fraction
        << "% of samples";
  return out.str();
}

// A measured ceiling and the clocks it ran at.
struct Ceiling {
  double rate = 0;
  GpuSampleSummary gpu;
};

// Device-to-device copy of 1 GiB by a kernel (a graph memcpy node may go to the slower copy
// engine); bytes read plus bytes written per second, GB/s.
Ceiling measure_copy(cudaStream_t stream, int sm_count, double warmup_ms, GpuMonitor& monitor) {
  const size_t bytes = size_t{1} << 30;
  DevBuf a(bytes), b(bytes);
  MXMOE_CUDA_CHECK(cudaMemset(a.get(), 1, bytes));
  const Timing t = time_graph(stream, {3, warmup_ms}, 20, monitor, [&] {
    copy_kernel<<<sm_count * 8, 512, 0, stream>>>(a.get<uint4>(), b.get<uint4>(), bytes / 16);
    MXMOE_CUDA_CHECK_LAUNCH();
  });
  return {2.0 * bytes / (t.ms * 1e-3) / 1e9, t.gpu};
}

__global__ void fill_random_bf16(__nv_bfloat16* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    p[i] = __float2bfloat16((x & 0xFFFF) / 65536.f - 0.5f);
  }
}

// cuBLAS bf16 GEMM (fp32 accumulate), 8192^3, random data: TFLOP/s.
Ceiling measure_bf16(cudaStream_t stream, double warmup_ms, GpuMonitor& monitor) {
  const int n = 8192;
  const size_t count = size_t{n} * n;
  DevBuf a(count * 2), b(count * 2), c(count * 2);
  fill_random_bf16<<<1024, 256, 0, stream>>>(a.get<__nv_bfloat16>(), count, 1);
  fill_random_bf16<<<1024, 256, 0, stream>>>(b.get<__nv_bfloat16>(), count, 2);
  MXMOE_CUDA_CHECK_LAUNCH();
  cublasHandle_t handle;
  MXMOE_REQUIRE(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS, "cublasCreate failed");
  cublasSetStream(handle, stream);
  const float alpha = 1.f, beta = 0.f;
  auto gemm = [&] {
    const cublasStatus_t st = cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a.get(), CUDA_R_16BF, n,
                                           b.get(), CUDA_R_16BF, n, &beta, c.get(), CUDA_R_16BF, n,
                                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    MXMOE_REQUIRE(st == CUBLAS_STATUS_SUCCESS, "cublasGemmEx failed: ", static_cast<int>(st));
  };
  gemm();  // cuBLAS picks and loads its kernel outside the capture
  MXMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  const Timing t = time_graph(stream, {3, warmup_ms}, 20, monitor, gemm);
  cublasDestroy(handle);
  return {2.0 * n * n * double(n) / (t.ms * 1e-3) / 1e12, t.gpu};
}

// The commit a record names: MXMOE_COMMIT from the environment (scripts pass it to machines whose
// copy of the tree has no git history), else the one read when the build was configured.
std::string commit_id() {
  const char* env = std::getenv("MXMOE_COMMIT");
  return env != nullptr && *env != '\0' ? env : MXMOE_GIT_COMMIT;
}

// The kernel driver's version line, where the system exposes it.
std::string driver_string() {
  std::ifstream f("/proc/driver/nvidia/version");
  std::string line;
  std::getline(f, line);
  return line;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

void progress(size_t done, size_t total, const std::string& what) {
  const int width = 30;
  const int filled = static_cast<int>(width * done / std::max<size_t>(total, 1));
  std::cerr << "\r[" << std::string(filled, '#') << std::string(width - filled, '.') << "] " << done << "/" << total
            << " " << what << "        " << std::flush;
  if (done == total) std::cerr << "\n";
}

// --tune: every batch size timed with each tile of the tile table that a tune table can select
// (plan::tune_candidates: the GEMV batches, the register-decode, swap-AB and, on Hopper, wgmma tiles
// this build has; those this device cannot run are skipped), the fastest kept, and the choices written
// as the preference table (plan/tune_table.hpp) that the runner reads from RunnerOptions::tune_file or
// MXMOE_TUNE_FILE. Each candidate is forced through RunnerOptions::plan (mxmoe/plan_override.hpp) and
// named by that override. Boundaries between choices sit at the geometric mean of the rows per expert of
// the batch sizes on either side.
void write_tune_table(const BenchOptions& o, const MoeConfig& cfg, const GpuInfo& gpu, const MoeLayerData& host,
                      int layers, const DevBuf& d_hidden, const DevBuf& d_out, const std::vector<DevBuf>& d_logits,
                      cudaStream_t stream, GpuMonitor& monitor) {
  struct Candidate {
    const kernels::TileRow* row;
    std::string name;     // the MXMOE_PLAN form that forces it, e.g. "mma=swap16"
    plan::TileForce force;
    TunePlan tune;        // what the tune table says where it wins
  };
  std::vector<Candidate> candidates;
  for (const size_t r : plan::tune_candidates()) {
    const kernels::TileRow& row = kernels::kTileTable[r];
    const plan::TileForce force = plan::force_of(row);
    candidates.push_back({&row, to_string(force.plan), force, *plan::tune_plan_of(row)});
  }
  std::vector<int64_t> tokens;
  for (const int64_t t : o.tokens)
    if (t > 0) tokens.push_back(t);
  std::sort(tokens.begin(), tokens.end());
  MXMOE_REQUIRE(!tokens.empty(), "--tune: needs a batch size above 0 in --tokens");
  const auto rows_per_expert = [&](int64_t t) {
    const int64_t pairs = t * cfg.top_k;
    return static_cast<double>(pairs) / static_cast<double>(std::min<int64_t>(cfg.num_experts, pairs));
  };
  RunnerOptions ropt;
  ropt.max_tokens = tokens.back();
  ropt.use_env = false;
  std::vector<std::vector<double>> us(candidates.size(), std::vector<double>(tokens.size(), INFINITY));
  for (size_t c = 0; c < candidates.size(); ++c) {
    const kernels::TileRow& row = *candidates[c].row;
    if ((row.archs & kernels::arch_of(gpu.cc_major, gpu.cc_minor)) == 0 ||
        (row.family == kernels::TileFamily::Wgmma && !sm90::wgmma_runs(gpu.index)))
      continue;
    ropt.backend = candidates[c].force.backend;
    ropt.plan = candidates[c].force.plan;
    std::vector<MoeRunner> runners;
    try {
      for (int l = 0; l < layers; ++l) runners.emplace_back(cfg, host.view(), ropt);
    } catch (const Error& e) {  // e.g. the 16-row batch does not fit this device at this shape
      std::cout << "tune: " << candidates[c].name << " skipped: " << e.what() << "\n";
      runners.clear();
    }
    if (runners.empty()) continue;
    DevBuf ws(std::max<size_t>(runners[0].workspace_bytes(), 1));
    for (size_t ti = 0; ti < tokens.size(); ++ti) {
      const Timing timing = time_graph(stream, {o.warmup, o.warmup_ms}, o.iterations, monitor, [&] {
        for (int l = 0; l < layers; ++l)
          runners[l].forward(d_hidden.get<uint16_t>(), d_logits[l].get<float>(), tokens[ti], d_out.get<uint16_t>(),
                             ws.get(), ws.bytes(), stream);
      });
      us[c][ti] = timing.ms * 1e3 / layers;
    }
    progress(c + 1, candidates.size(), "tune candidates");
  }
  TuneTable table;
  table.device = gpu.name;
  table.compute_capability = std::to_string(gpu.cc_major) + "." + std::to_string(gpu.cc_minor);
  table.experts = cfg.num_experts;
  table.top_k = cfg.top_k;
  table.hidden = cfg.hidden;
  table.intermediate = cfg.intermediate;
  std::cout << "tune: us per layer (";
  for (size_t c = 0; c < candidates.size(); ++c) std::cout << (c ? ", " : "") << candidates[c].name;
  std::cout << ") -> choice\n";
  int previous = -1;
  for (size_t ti = 0; ti < tokens.size(); ++ti) {
    int best = 0;
    for (size_t c = 1; c < candidates.size(); ++c)
      if (us[c][ti] < us[best][ti]) best = static_cast<int>(c);
    std::cout << std::setw(6) << tokens[ti] << std::fixed << std::setprecision(1);
    for (size_t c = 0; c < candidates.size(); ++c) std::cout << std::setw(10) << us[c][ti];
    std::cout << "  -> " << candidates[best].name << "\n";
    if (best != previous) {
      if (!table.plans.empty())  // close the previous run between its last and this first batch size
        table.plans.back().max_rows_per_expert = std::sqrt(rows_per_expert(tokens[ti - 1]) * rows_per_expert(tokens[ti]));
      table.plans.push_back(candidates[best].tune);
      previous = best;
    }
  }
  // Equal rows per expert on both sides of a boundary cannot separate plans: keep the later choice.
  for (size_t p = 0; p + 1 < table.plans.size();)
    if (p > 0 && table.plans[p].max_rows_per_expert <= table.plans[p - 1].max_rows_per_expert)
      table.plans.erase(table.plans.begin() + static_cast<std::ptrdiff_t>(p));
    else
      ++p;
  const std::string json = tune_table_to_json(table);
  (void)parse_tune_table(json, "--tune output");  // what the runner will read back
  std::ofstream f(o.tune_path);
  MXMOE_REQUIRE(f.good(), "--tune: cannot write '", o.tune_path, "'");
  f << json;
  std::cout << "wrote " << o.tune_path << " (use it with MXMOE_TUNE_FILE=" << o.tune_path << ")\n";
}

int run_bench(const BenchOptions& o) {
  const ProbeResult pr = probe();
  MXMOE_REQUIRE(pr.no_gpu_reason.empty(), "bench: needs a CUDA GPU (", pr.no_gpu_reason, ")");
  const GpuInfo& gpu = pr.gpus[0];
  const MoeConfig cfg =
      o.experts ? custom_config(o.experts, o.top_k, o.hidden, o.intermediate) : MoeConfig::preset(o.preset);
  RunnerOptions ropt;
  ropt.backend = parse_backend(o.backend);
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
  const Ceiling copy = measure_copy(stream, gpu.sm_count, o.warmup_ms, monitor);
  const Ceiling bf16 = measure_bf16(stream, o.warmup_ms, monitor);
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
    progress(l + 1, layers, "layers uploaded");
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
  record["driver"] = driver_string().empty() ? std::to_string(pr.driver_version) : driver_string();
  record["cuda_driver_api"] = pr.driver_version;
  record["runtime"] = pr.runtime_version;
  record["commit"] = commit_id();
  record["date"] = utc_now();
  record["model"] = cfg.name;
  record["shape"] = {{"experts", cfg.num_experts}, {"top_k", cfg.top_k}, {"hidden", cfg.hidden},
                     {"intermediate", cfg.intermediate}};
  record["backend"] = to_string(runners[0].backend());
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
  record["ceilings_gpu"] = {{"copy", gpu_json(copy.gpu)}, {"bf16", gpu_json(bf16.gpu)}};
  record["rows"] = nlohmann::json::array();

  std::ostringstream table;
  table << "device " << gpu.name << " | copy " << std::fixed << std::setprecision(0) << copy_gbps << " GB/s"
        << clock_note(copy.gpu) << " | bf16 " << bf16_tflops << " TFLOP/s" << clock_note(bf16.gpu) << " | " << cfg.name
        << " | " << layers << " layers rotated | warm-up " << o.warmup_ms << " ms";
  if (!o.target.empty())
    table << " | plan of target " << o.target << (green ? " on " + std::to_string(green->sm_count()) + " SMs" : "");
  table << "\n";
  table << std::setw(6) << "T" << std::setw(11) << "us/layer" << std::setw(9) << "experts" << std::setw(10) << "GB/s"
        << std::setw(8) << "%copy" << std::setw(9) << "TFLOP/s" << std::setw(8) << "%bf16" << std::setw(7) << "MHz"
        << std::setw(5) << "W" << "  backend / plan\n";
  bool any_limited = false;
  size_t done = 0;
  for (const int64_t t : o.tokens) {
    const Timing timing = time_graph(stream, {o.warmup, o.warmup_ms}, o.iterations, monitor, [&] {
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
            n == MoeRunner::kAllStages ? ms : time_graph(stream, {o.warmup, o.warmup_ms}, o.iterations, monitor, [&] {
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
    row["gpu"] = gpu_json(timing.gpu);
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
    progress(++done, o.tokens.size(), "batch sizes");
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
    write_tune_table(o, cfg, gpu, host, layers, d_hidden, d_out, d_logits, stream, monitor);
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
    if (o->experts != 0) custom_config(o->experts, o->top_k, o->hidden, o->intermediate);
    exit_code = run_bench(*o);
  });
}

}  // namespace mxmoe::cli
