// Shared pieces of the `mxmoe` command (see cli_common.hpp).
#include "cli_common.hpp"

#include <cuda_runtime.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "mxmoe/error.hpp"
#include "mxmoe/formats.hpp"

namespace mxmoe::cli {
// --- command-line helpers ----------------------------------------------------------------------
std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

namespace {
// A whole decimal number parsed into T with nothing left over; nullopt for "", "1e3", "0x10", "-1"
// into an unsigned type, and values past T's range.
template <class T>
std::optional<T> parse_whole(const std::string& text) {
  T value{};
  const char* end = text.data() + text.size();
  const std::from_chars_result r = std::from_chars(text.data(), end, value, 10);
  if (text.empty() || r.ec != std::errc() || r.ptr != end) return std::nullopt;
  return value;
}
}  // namespace

CLI::Validator integer_in(int64_t lo, int64_t hi) {
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        const std::optional<int64_t> value = parse_whole<int64_t>(text);
        if (value && *value >= lo && *value <= hi) return {};
        return "'" + text + "' is not an integer in " + range;
      },
      "INT in " + range, "integer_in");
}

CLI::Validator seed_value() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (parse_whole<uint64_t>(text)) return {};
        return "'" + text + "' is not a seed: expected an integer in [0, 18446744073709551615]";
      },
      "UINT64", "seed");
}

void check_environment() {
  try {
    with_environment(RunnerOptions{});
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

void check_output_path(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty()) throw UsageError("--output: empty path");
  if (fs::is_directory(path, ec)) throw UsageError("--output: '" + path + "' is a directory; give a file name");
  if (fs::exists(path, ec)) {
    if (::access(path.c_str(), W_OK) != 0) throw UsageError("--output: '" + path + "' is not writable");
    return;
  }
  const fs::path parent = fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
  if (!fs::is_directory(parent, ec))
    throw UsageError("--output: the folder '" + parent.string() + "' of '" + path + "' does not exist");
  if (::access(parent.c_str(), W_OK) != 0)
    throw UsageError("--output: the folder '" + parent.string() + "' of '" + path + "' is not writable");
}

std::string validate_backend_name(std::string& value) {
  try {
    parse_backend(value);
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

std::string validate_preset_name(std::string& value) {
  try {
    MoeConfig::preset(value);
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

uint64_t seed_or_random(const std::optional<uint64_t>& seed) {
  if (seed) return *seed;
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

// --- inputs -------------------------------------------------------------------------------------
std::vector<uint16_t> random_bf16(size_t count, uint64_t seed, double stddev) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> dist(0.0, stddev);
  std::vector<uint16_t> values(count);
  for (auto& v : values) v = float_to_bf16(static_cast<float>(dist(rng)));
  return values;
}

std::vector<float> random_f32(size_t count, uint64_t seed, double stddev) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> dist(0.0, stddev);
  std::vector<float> values(count);
  for (auto& v : values) v = static_cast<float>(dist(rng));
  return values;
}

std::vector<uint16_t> read_bf16_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  MXMOE_REQUIRE(in.is_open(), "--input: cannot open '", path, "'");
  const std::streamoff size = in.tellg();
  MXMOE_REQUIRE(size >= 0 && size % 2 == 0, "--input: '", path, "' has ", size,
                " bytes; expected raw bf16 values (an even number of bytes)");
  std::vector<uint16_t> values(static_cast<size_t>(size) / 2);
  in.seekg(0);
  in.read(reinterpret_cast<char*>(values.data()), size);
  MXMOE_REQUIRE(in.good() || values.empty(), "--input: reading '", path, "' failed");
  return values;
}

void write_bf16_file(const std::string& path, std::span<const uint16_t> values) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  MXMOE_REQUIRE(out.is_open(), "--output: cannot open '", path, "' for writing");
  out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size_bytes()));
  out.close();
  MXMOE_REQUIRE(out.good(), "--output: writing '", path, "' failed");
}

// --- running ------------------------------------------------------------------------------------
ForwardResult run_forward(const MoeRunner& runner, std::span<const uint16_t> hidden,
                          std::span<const float> router_logits, int64_t tokens, cudaStream_t stream) {
  const auto t = static_cast<size_t>(tokens);
  const size_t hidden_elems = t * static_cast<size_t>(runner.config().hidden);
  MXMOE_REQUIRE(hidden.size() == hidden_elems, "hidden: expected ", hidden_elems, " values, got ", hidden.size());
  MXMOE_REQUIRE(router_logits.size() == t * static_cast<size_t>(runner.config().num_experts),
                "router_logits: expected ", t * static_cast<size_t>(runner.config().num_experts), " values, got ",
                router_logits.size());

  ForwardResult result;
  result.out.assign(hidden_elems, 0xFFFF);  // poisoned: a bf16 NaN wherever nothing was written
  using clock = std::chrono::steady_clock;

  if (!runner.on_gpu()) {
    std::vector<std::byte> workspace(runner.workspace_bytes());
    const auto start = clock::now();
    runner.forward(hidden.data(), router_logits.data(), tokens, result.out.data(), workspace.data(),
                   workspace.size());
    result.milliseconds = std::chrono::duration<double, std::milli>(clock::now() - start).count();
    return result;
  }

  const DeviceBuffer d_hidden(hidden.data(), hidden.size_bytes());
  const DeviceBuffer d_logits(router_logits.data(), router_logits.size_bytes());
  const DeviceBuffer d_out(hidden_elems * sizeof(uint16_t));
  const DeviceBuffer d_workspace(runner.workspace_bytes());
  if (d_out.bytes() > 0) MXMOE_CUDA_CHECK(cudaMemset(d_out.get(), 0xFF, d_out.bytes()));
  MXMOE_CUDA_CHECK(cudaDeviceSynchronize());

  const auto start = clock::now();
  runner.forward(d_hidden.get<const uint16_t>(), d_logits.get<const float>(), tokens, d_out.get<uint16_t>(),
                 d_workspace.get(), d_workspace.bytes(), stream);
  MXMOE_CUDA_CHECK(cudaGetLastError());
  if (stream != nullptr) MXMOE_CUDA_CHECK(cudaStreamSynchronize(stream));  // a green context's stream too
  MXMOE_CUDA_CHECK(cudaDeviceSynchronize());
  result.milliseconds = std::chrono::duration<double, std::milli>(clock::now() - start).count();

  if (d_out.bytes() > 0)
    MXMOE_CUDA_CHECK(cudaMemcpy(result.out.data(), d_out.get(), d_out.bytes(), cudaMemcpyDeviceToHost));
  return result;
}

// --- measurements -------------------------------------------------------------------------------
ErrorStats compare_to_reference(std::span<const uint16_t> out, std::span<const double> ref) {
  MXMOE_REQUIRE(out.size() == ref.size(), "compare: ", out.size(), " outputs against ", ref.size(), " references");
  ErrorStats stats;
  double diff_sq = 0, ref_sq = 0;
  int64_t first_nan = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    const double value = bf16_to_float(out[i]);
    ref_sq += ref[i] * ref[i];
    if (std::isnan(value)) {
      if (stats.nan_count++ == 0) first_nan = static_cast<int64_t>(i);
      continue;
    }
    const double diff = std::abs(value - ref[i]);
    diff_sq += diff * diff;
    if (stats.worst_index < 0 || diff > stats.max_abs) {
      stats.max_abs = diff;
      stats.worst_index = static_cast<int64_t>(i);
    }
  }
  if (first_nan >= 0) stats.worst_index = first_nan;  // a NaN is worse than any finite error
  if (stats.nan_count > 0) stats.rel = std::numeric_limits<double>::quiet_NaN();
  else if (ref_sq > 0) stats.rel = std::sqrt(diff_sq / ref_sq);
  else stats.rel = diff_sq > 0 ? std::numeric_limits<double>::infinity() : 0.0;
  return stats;
}

size_t count_nan_bf16(std::span<const uint16_t> values) {
  size_t count = 0;
  for (uint16_t v : values) count += std::isnan(bf16_to_float(v)) ? 1 : 0;
  return count;
}

std::string describe_shape(const MoeConfig& config) {
  return config.name + " (experts " + std::to_string(config.num_experts) + ", top-k " + std::to_string(config.top_k) +
         ", hidden " + std::to_string(config.hidden) + ", intermediate " + std::to_string(config.intermediate) + ")";
}

MoeConfig custom_config(int experts, int top_k, int hidden, int intermediate) {
  MoeConfig config;
  config.name = "custom";
  config.num_experts = experts;
  config.top_k = top_k;
  config.hidden = hidden;
  config.intermediate = intermediate;
  try {
    config.validate();
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  return config;
}

}  // namespace mxmoe::cli
