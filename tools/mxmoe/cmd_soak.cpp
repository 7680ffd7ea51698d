// `mxmoe soak`: many forwards on one runner and one workspace, each with a random T in [0, max] and
// random routing (fresh logits sets, some with every token on one expert), as a serving engine would
// call it. Fails on any error, on device memory that grows after the first forwards, and on a
// periodic check of a small forward against the fp64 CPU reference.
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "cli_common.hpp"
#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "mxmoe/mxmoe.hpp"

namespace mxmoe::cli {
namespace {

struct SoakOptions {
  std::string preset = "gpt-oss-20b";
  std::string backend = "auto";
  int64_t forwards = 100000;
  int64_t max_tokens = 4096;
  int64_t check_every = 5000;  // forwards between reference checks and memory readings
  uint64_t seed = 1;
};

size_t free_device_memory() {
  size_t free = 0, total = 0;
  MXMOE_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return free;
}

int run_soak(const SoakOptions& o) {
  check_environment();
  MXMOE_REQUIRE(gpu_available(), "soak: needs a usable GPU (", probe().no_gpu_reason, ")");
  MXMOE_REQUIRE(o.forwards >= 1, "--forwards: must be >= 1");
  MXMOE_REQUIRE(o.max_tokens >= 1, "--max-tokens: must be >= 1");
  const MoeConfig cfg = MoeConfig::preset(o.preset);
  const MoeLayerData layer = MoeLayerData::random(cfg, o.seed);
  const MoeRunner runner(cfg, layer.view(), RunnerOptions{parse_backend(o.backend), o.max_tokens, false});
  const auto h = static_cast<size_t>(cfg.hidden), e = static_cast<size_t>(cfg.num_experts);
  const auto max_t = static_cast<size_t>(o.max_tokens);

  // Inputs: one hidden block and a few logits sets of max_tokens rows; a forward uses the first T rows
  // of one set. Set 0 sends every token to one expert.
  const std::vector<uint16_t> hidden = random_bf16(max_t * h, o.seed + 1);
  constexpr int kLogitSets = 8;
  std::vector<std::vector<float>> logits(kLogitSets);
  std::vector<DeviceBuffer> d_logits;
  for (int s = 0; s < kLogitSets; ++s) {
    logits[s] = random_f32(max_t * e, o.seed + 10 + s, 2.0);
    if (s == 0)
      for (size_t t = 0; t < max_t; ++t) logits[s][t * e + 3 % e] += 100.f;
    d_logits.emplace_back(logits[s].data(), logits[s].size() * 4);
  }
  const DeviceBuffer d_hidden(hidden.data(), hidden.size() * 2);
  DeviceBuffer d_out(max_t * h * 2), ws(std::max<size_t>(runner.workspace_bytes(), 1));
  cudaStream_t stream;
  MXMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  std::mt19937_64 rng(o.seed + 99);
  std::uniform_int_distribution<int64_t> pick_t(0, o.max_tokens);
  auto forward = [&](int64_t t, int set) {
    runner.forward(d_hidden.get<uint16_t>(), d_logits[set].get<float>(), t, d_out.get<uint16_t>(), ws.get(), ws.bytes(),
                   stream);
  };
  // One small forward against the reference: catches a soak that runs but computes garbage.
  auto check = [&](int set) {
    const int64_t t = std::min<int64_t>(8, o.max_tokens);
    MXMOE_CUDA_CHECK(cudaMemsetAsync(d_out.get(), 0xFF, static_cast<size_t>(t) * h * 2, stream));
    forward(t, set);
    std::vector<uint16_t> out(static_cast<size_t>(t) * h);
    MXMOE_CUDA_CHECK(cudaMemcpyAsync(out.data(), d_out.get(), out.size() * 2, cudaMemcpyDeviceToHost, stream));
    MXMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<double> ref(out.size());
    ReferenceOptions ro;
    ro.mxfp8_gemm1_input = ro.mxfp8_gemm2_input = backend_uses_mxfp8(runner.backend());
    reference_moe_f64(cfg, layer.view(), std::span(hidden).first(out.size()),
                      std::span(logits[set]).first(static_cast<size_t>(t) * e), t, ref, ro);
    const ErrorStats s = compare_to_reference(out, ref);
    MXMOE_REQUIRE(s.nan_count == 0 && s.rel <= 1e-2, "soak: a check forward (T = ", t, ", logits set ", set,
                  ") is off the reference: relative error ", s.rel, ", ", s.nan_count, " NaN outputs");
  };

  std::cout << "soak: " << describe_shape(cfg) << ", backend " << to_string(runner.backend()) << ", " << o.forwards
            << " forwards, T random in [0, " << o.max_tokens << "], seed " << o.seed << "\n";
  for (int i = 0; i < 4; ++i) forward(pick_t(rng), i % kLogitSets);  // first use of every lazy resource
  check(0);
  const size_t free_before = free_device_memory();
  const auto start = std::chrono::steady_clock::now();
  int64_t tokens = 0, checks = 1;
  for (int64_t n = 1; n <= o.forwards; ++n) {
    const int64_t t = pick_t(rng);
    tokens += t;
    forward(t, static_cast<int>(rng() % kLogitSets));
    if (n % o.check_every == 0 || n == o.forwards) {
      MXMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
      check(static_cast<int>(n / o.check_every % kLogitSets));
      ++checks;
      const size_t free_now = free_device_memory();
      MXMOE_REQUIRE(free_now >= free_before, "soak: device memory grew by ", free_before - free_now,
                    " bytes after ", n, " forwards");
      std::fprintf(stderr, "\rsoak: %lld / %lld forwards", static_cast<long long>(n), static_cast<long long>(o.forwards));
    }
  }
  std::fprintf(stderr, "\n");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "soak: PASS: " << o.forwards << " forwards (" << tokens << " tokens) in " << seconds << " s, " << checks
            << " reference checks, device memory free " << free_before << " bytes before and "
            << free_device_memory() << " after\n";
  cudaStreamDestroy(stream);
  return kExitOk;
}

}  // namespace

void add_soak_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<SoakOptions>();
  CLI::App* cmd = app.add_subcommand("soak", "Many forwards with random T and routing on one runner (GPU): no error, no memory growth");
  cmd->add_option("--preset", o->preset, "Model preset: " + joined(MoeConfig::preset_names()))
      ->capture_default_str()
      ->check(CLI::Validator(validate_preset_name, "PRESET", "preset"));
  cmd->add_option("--backend", o->backend, "Backend: " + joined(backend_names()))
      ->capture_default_str()
      ->check(CLI::Validator(validate_backend_name, "BACKEND", "backend"));
  const CLI::Validator count = integer_in(1, std::numeric_limits<int64_t>::max());
  cmd->add_option("--forwards", o->forwards, "Forwards to run")->check(count)->capture_default_str();
  cmd->add_option("--max-tokens", o->max_tokens, "Largest T (T is uniform in [0, max])")
      ->check(integer_in(1, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--check-every", o->check_every, "Forwards between reference checks")->check(count)->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of the weights, inputs and the T sequence")
      ->check(seed_value())
      ->capture_default_str();
  cmd->callback([o, &exit_code] { exit_code = run_soak(*o); });
}

}  // namespace mxmoe::cli
