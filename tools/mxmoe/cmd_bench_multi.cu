// `mxmoe bench-multi`: one MoE layer sharded over N GPUs of this host (tensor- or expert-parallel, tokens
// replicated), one process driving them through NCCL, one thread per GPU. Per batch size, graph-captured
// and replayed as `mxmoe bench` times: the one-GPU layer (GPU 0), each rank's partial without the collective (the slowest
// rank: what an engine that reduces itself sees), the layer with the all-reduce, and the all-reduce alone
// with its bytes; scaling efficiency = one-GPU time / (N x layer time). Layers are rotated so that a shard
// small enough for L2 is not flattered.
// ep-dp: expert-parallel over data-parallel tokens (ShardedMoe::forward_data_parallel). T is each rank's
// own tokens; the one-GPU layer and the partial run all N x T, and the collectives (the all-gather and
// the reduce-scatter) are the layer's time less the partial's.
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <exception>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench_record.hpp"
#include "bench_timing.hpp"
#include "cli_common.hpp"
#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "mxmoe/mxmoe.hpp"

namespace mxmoe::cli {
namespace {

struct MultiOptions {
  std::string preset = "gpt-oss-120b";
  int gpus = 2;
  std::string parallel = "tp";
  std::vector<int64_t> tokens = {1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096};
  int iterations = 50, layers = 4;
  double warmup_ms = 1000;
  std::string json_path;
  uint64_t seed = 1234;
  bool fp32 = false;  // fp32 partials
};

// A rank's layers (rotated) and buffers on its GPU.
struct RankState {
  std::vector<std::unique_ptr<ShardedMoe>> layers;
  DeviceBuffer hidden, logits, out, workspace;
  cudaStream_t stream = nullptr;
};

// fn(device) on one thread per listed device, each on its GPU; returns when all are done and rethrows
// the first exception. One thread per rank, as engines run: a single thread launching several GPUs'
// NCCL graphs in turn can deadlock against a peer's waiting NCCL kernel.
template <class Fn>
void on_devices(const std::vector<int>& devices, Fn&& fn) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(devices.size());
  for (size_t i = 0; i < devices.size(); ++i)
    threads.emplace_back([&, i] {
      try {
        MXMOE_CUDA_CHECK(cudaSetDevice(devices[i]));
        fn(devices[i]);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// Runs body(device) once and captures it on each listed device's stream (its own thread), uploads the
// graphs, replays them together and returns the median over `iterations` of the slowest device's replay, in ms.
template <class Body>
double time_graphs(const std::vector<int>& devices, std::vector<RankState>& ranks, const MultiOptions& o, Body&& body) {
  const size_t n = ranks.size();
  std::vector<cudaGraph_t> graphs(n);
  std::vector<cudaGraphExec_t> execs(n);
  std::vector<cudaEvent_t> start(n), stop(n);
  on_devices(devices, [&](int d) {
    cudaStream_t s = ranks[d].stream;
    // Once eagerly first: NCCL connects its channels at a communicator's first collective of a kind,
    // which it cannot do inside a capture.
    body(d);
    MXMOE_CUDA_CHECK(cudaStreamSynchronize(s));
    MXMOE_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    body(d);
    MXMOE_CUDA_CHECK(cudaStreamEndCapture(s, &graphs[d]));
    MXMOE_CUDA_CHECK(cudaGraphInstantiate(&execs[d], graphs[d], 0));
    MXMOE_CUDA_CHECK(cudaGraphUpload(execs[d], s));
    MXMOE_CUDA_CHECK(cudaEventCreate(&start[d]));
    MXMOE_CUDA_CHECK(cudaEventCreate(&stop[d]));
    MXMOE_CUDA_CHECK(cudaStreamSynchronize(s));
  });
  // `count` replays on every device; with `timed`, the slowest device's time of each.
  auto replays = [&](int count, std::vector<double>* times) {
    std::vector<std::vector<float>> per(n);
    on_devices(devices, [&](int d) {
      cudaStream_t s = ranks[d].stream;
      for (int i = 0; i < count; ++i) {
        if (times != nullptr) MXMOE_CUDA_CHECK(cudaEventRecord(start[d], s));
        MXMOE_CUDA_CHECK(cudaGraphLaunch(execs[d], s));
        if (times == nullptr) continue;
        MXMOE_CUDA_CHECK(cudaEventRecord(stop[d], s));
        MXMOE_CUDA_CHECK(cudaEventSynchronize(stop[d]));
        float ms = 0;
        MXMOE_CUDA_CHECK(cudaEventElapsedTime(&ms, start[d], stop[d]));
        per[d].push_back(ms);
      }
      MXMOE_CUDA_CHECK(cudaStreamSynchronize(s));
    });
    if (times != nullptr)
      for (int i = 0; i < count; ++i) {
        double worst = 0;
        for (int d : devices) worst = std::max(worst, static_cast<double>(per[d][i]));
        times->push_back(worst);
      }
  };
  const auto warm_start = std::chrono::steady_clock::now();
  do replays(3, nullptr);
  while (std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - warm_start).count() < o.warmup_ms);
  std::vector<double> times;
  replays(o.iterations, &times);
  on_devices(devices, [&](int d) {
    cudaEventDestroy(start[d]);
    cudaEventDestroy(stop[d]);
    cudaGraphExecDestroy(execs[d]);
    cudaGraphDestroy(graphs[d]);
  });
  return bench::median(std::move(times));
}

int run_bench_multi(const MultiOptions& o) {
  const MoeConfig config = MoeConfig::preset(o.preset);
  const bool dp = o.parallel == "ep-dp";
  const ShardMode mode = dp ? ShardMode::Expert : parse_shard_mode(o.parallel);
  const int64_t gathered = dp ? o.gpus : 1;  // the layer's tokens per rank's T
  const int64_t max_tokens = gathered * *std::max_element(o.tokens.begin(), o.tokens.end());
  LocalNcclWorld world(o.gpus);
  RunnerOptions options;
  options.max_tokens = max_tokens;
  options.backend = Backend::Auto;

  std::cout << "bench-multi: " << o.preset << ", " << o.gpus << " GPUs, " << to_string(mode) << "-parallel, "
            << (dp ? "data-parallel tokens (T per rank; one GPU and the partial run N x T), " : "") << o.layers << " layers rotated; building the shards..." << std::endl;
  std::vector<RankState> ranks(static_cast<size_t>(o.gpus));
  std::vector<std::unique_ptr<MoeRunner>> single;  // the one-GPU layers, on GPU 0
  DeviceBuffer single_workspace;
  // One random layer, uploaded o.layers times: the rotation is about addresses (L2), not values, and
  // generating gpt-oss-120b's 1.7 GB layer once keeps the set-up within seconds.
  const MoeLayerData whole = MoeLayerData::random(config, o.seed);
  std::vector<MoeLayerData> parts;
  for (int r = 0; r < o.gpus; ++r) {
    const ShardSpec spec = mode == ShardMode::Tensor ? ShardSpec::tensor(r, o.gpus) : ShardSpec::expert(r, o.gpus);
    parts.push_back(slice_layer(resolve_shard(config, spec), whole));
  }
  for (int j = 0; j < o.layers; ++j) {
    MXMOE_CUDA_CHECK(cudaSetDevice(0));
    single.push_back(std::make_unique<MoeRunner>(config, whole.view(), options));
    for (int r = 0; r < o.gpus; ++r) {
      MXMOE_CUDA_CHECK(cudaSetDevice(r));
      const ShardSpec spec = mode == ShardMode::Tensor ? ShardSpec::tensor(r, o.gpus) : ShardSpec::expert(r, o.gpus);
      const LayerShard shard = resolve_shard(config, spec);
      ranks[r].layers.push_back(std::make_unique<ShardedMoe>(shard, parts[r].view(), options, world.comm(r), o.fp32));
    }
  }
  const size_t hidden_bytes = static_cast<size_t>(max_tokens) * config.hidden * 2;
  const auto hidden = random_bf16(static_cast<size_t>(max_tokens) * config.hidden, o.seed);
  const auto logits = random_f32(static_cast<size_t>(max_tokens) * config.num_experts, o.seed + 1);
  for (int r = 0; r < o.gpus; ++r) {
    MXMOE_CUDA_CHECK(cudaSetDevice(r));
    RankState& k = ranks[r];
    k.hidden = DeviceBuffer(hidden.data(), hidden.size() * 2);
    k.logits = DeviceBuffer(logits.data(), logits.size() * 4);
    k.out = DeviceBuffer(hidden_bytes);
    k.workspace = DeviceBuffer(dp ? k.layers[0]->data_parallel_workspace_bytes() : k.layers[0]->workspace_bytes());
    MXMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&k.stream, cudaStreamNonBlocking));
  }
  MXMOE_CUDA_CHECK(cudaSetDevice(0));
  single_workspace = DeviceBuffer(single[0]->workspace_bytes());
  cudaDeviceProp prop{};
  MXMOE_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));

  nlohmann::ordered_json record;
  record["device"] = prop.name;
  record["gpus"] = o.gpus;
  record["parallel"] = to_string(mode);
  record["tokens"] = dp ? "data-parallel: tokens per rank; one_gpu_us and partial_us run gpus x tokens" : "replicated";
  record["commit"] = bench::commit_id();
  record["date"] = bench::utc_now();
  record["model"] = config.name;
  record["layers_rotated"] = o.layers;
  record["iterations"] = o.iterations;
  record["partials"] = o.fp32 ? "fp32" : "bf16";
  record["allreduce_alone"] = dp ? "none: collectives_us = layer_us - partial_us (all-gather + reduce-scatter)" : "bf16";
  record["rows"] = nlohmann::json::array();

  std::cout << std::setw(6) << "T" << std::setw(12) << "1 GPU us" << std::setw(12) << "partial us" << std::setw(9)
            << "ratio" << std::setw(12) << "layer us" << std::setw(9) << "ratio" << std::setw(12) << (dp ? "collectives" : "allreduce")
            << std::setw(12) << "bytes" << std::setw(8) << "share" << std::setw(8) << "eff" << "\n";
  std::vector<int> all(static_cast<size_t>(o.gpus));
  for (int r = 0; r < o.gpus; ++r) all[r] = r;
  for (int64_t t : o.tokens) {
    const double per = 1e3 / o.layers;  // ms per replay of all layers -> us per layer
    const int64_t all_t = gathered * t;  // the layer's tokens
    const double one = per * time_graphs({0}, ranks, o, [&](int) {
      for (const auto& l : single)
        l->forward(ranks[0].hidden.get<uint16_t>(), ranks[0].logits.get<float>(), all_t, ranks[0].out.get<uint16_t>(),
                   single_workspace.get(), single_workspace.bytes(), ranks[0].stream);
    });
    double partial = 0;
    for (int r = 0; r < o.gpus; ++r) {
      partial = std::max(partial, per * time_graphs({r}, ranks, o, [&](int d) {
                           RankState& k = ranks[d];
                           for (const auto& l : k.layers)
                             l->forward_partial(k.hidden.get<uint16_t>(), k.logits.get<float>(), all_t,
                                                k.out.get<uint16_t>(), k.workspace.get(), k.workspace.bytes(), k.stream);
                         }));
    }
    const double layer = per * time_graphs(all, ranks, o, [&](int d) {
      RankState& k = ranks[d];
      // Data-parallel: rank d's own tokens are its slice of the batch (other routing on each rank).
      const int64_t first = dp ? d * t : 0;
      for (const auto& l : k.layers)
        if (dp)
          l->forward_data_parallel(k.hidden.get<uint16_t>() + first * config.hidden,
                                   k.logits.get<float>() + first * config.num_experts, t, k.out.get<uint16_t>(),
                                   k.workspace.get(), k.workspace.bytes(), k.stream);
        else
          l->forward(k.hidden.get<uint16_t>(), k.logits.get<float>(), t, k.out.get<uint16_t>(), k.workspace.get(),
                     k.workspace.bytes(), k.stream);
    });
    // The collective alone: the bf16 all-reduce (fp32 partials move twice these bytes inside `layer`); for
    // ep-dp the layer less the partial, and the bytes each rank receives: the gathered hidden states and
    // logits of the other ranks, and its T rows of the reduce-scatter from each of them.
    const double collective = dp ? layer - partial : per * time_graphs(all, ranks, o, [&](int d) {
      for (const auto& l : ranks[d].layers) l->all_reduce(ranks[d].out.get<uint16_t>(), t, ranks[d].stream);
    });
    const double partial_bytes = o.fp32 ? 4.0 : 2.0;
    const double bytes = dp ? static_cast<double>(o.gpus - 1) * t *
                                  (config.hidden * (2.0 + partial_bytes) + config.num_experts * 4.0)
                            : static_cast<double>(t) * config.hidden * 2;
    const double efficiency = one / (o.gpus * layer);
    std::cout << std::setw(6) << t << std::fixed << std::setprecision(1) << std::setw(12) << one << std::setw(12)
              << partial << std::setprecision(3) << std::setw(9) << partial / one << std::setprecision(1)
              << std::setw(12) << layer << std::setprecision(3) << std::setw(9) << layer / one << std::setprecision(1)
              << std::setw(12) << collective << std::setw(12) << std::setprecision(0) << bytes << std::setprecision(3)
              << std::setw(8) << collective / layer << std::setw(8) << efficiency << std::endl;
    nlohmann::ordered_json row;
    row["tokens"] = t;
    row["one_gpu_us"] = one;
    row["partial_us"] = partial;
    row["partial_ratio"] = partial / one;
    row["layer_us"] = layer;
    row["layer_ratio"] = layer / one;
    row[dp ? "collectives_us" : "allreduce_us"] = collective;
    row[dp ? "collective_bytes_received" : "allreduce_bytes"] = bytes;
    row[dp ? "collectives_share" : "allreduce_share"] = collective / layer;
    row["scaling_efficiency"] = efficiency;
    row["plan_one_gpu"] = single[0]->describe_plan(all_t);
    row["plan_rank0"] = ranks[0].layers[0]->runner().describe_plan(all_t);
    record["rows"].push_back(row);
  }
  for (auto& k : ranks) cudaStreamDestroy(k.stream);
  if (!o.json_path.empty()) {
    std::ofstream f(o.json_path);
    f << record.dump(2) << "\n";
    MXMOE_REQUIRE(f.good(), "--json: cannot write '", o.json_path, "'");
    std::cout << "record: " << o.json_path << "\n";
  }
  return kExitOk;
}

}  // namespace

void add_bench_multi_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<MultiOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench-multi", "Time one MoE layer sharded over several GPUs of this host (NCCL; tensor- or expert-parallel)");
  cmd->add_option("--preset", o->preset, "Model preset: " + joined(MoeConfig::preset_names()))
      ->capture_default_str()
      ->check(CLI::Validator(validate_preset_name, "PRESET", "preset"));
  cmd->add_option("--gpus", o->gpus, "GPUs (ranks), 1 .. the GPUs present")->check(integer_in(1, 64))->capture_default_str();
  cmd->add_option("--parallel", o->parallel,
                  "tp (tensor-parallel), ep (expert-parallel), tokens replicated; or ep-dp (expert-parallel, each "
                  "rank its own T tokens: all-gather, local experts, reduce-scatter)")
      ->check(CLI::IsMember({"tp", "ep", "tensor", "expert", "ep-dp"}))
      ->capture_default_str();
  cmd->add_option("--tokens", o->tokens, "Batch sizes to time")
      ->delimiter(',')
      ->capture_default_str()
      ->check(integer_in(1, int64_t{1} << 20));
  cmd->add_option("--iterations", o->iterations, "Timed graph replays per batch (median)")
      ->check(integer_in(5, 100000))
      ->capture_default_str();
  cmd->add_option("--warmup-ms", o->warmup_ms, "Untimed replays first for at least this long")
      ->check(CLI::Range(0.0, 60000.0))
      ->capture_default_str();
  cmd->add_option("--layers", o->layers, "Layers to rotate (L2 must not hold a shard's experts)")
      ->check(integer_in(1, 64))
      ->capture_default_str();
  cmd->add_option("--json", o->json_path, "Write the benchmark record to this file");
  cmd->add_option("--seed", o->seed, "Seed of the random weights and inputs")->check(seed_value())->capture_default_str();
  cmd->add_flag("--fp32-partials", o->fp32, "Sum the ranks' partial outputs in fp32 (rounded once; twice the bytes)");
  cmd->callback([o, &exit_code] {
    check_environment();
    if (!o->json_path.empty()) check_output_path(o->json_path);
    exit_code = run_bench_multi(*o);
  });
}

}  // namespace mxmoe::cli
