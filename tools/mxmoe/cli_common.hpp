#pragma once
// Shared pieces of the `mxmoe` command: subcommand registration, exit codes, seeds, random inputs,
// a CUDA device buffer, one-forward execution on host or device, and error measurements.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mxmoe/config.hpp"
#include "mxmoe/error.hpp"
#include "mxmoe/runner.hpp"

namespace CLI {
class App;
class Validator;
}

namespace mxmoe::cli {

// Exit codes of every subcommand.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // a failed check, a mxmoe::Error at run time
inline constexpr int kExitUsage = 2;    // bad command line or environment

// What the user typed is wrong (an option value, or MXMOE_BACKEND and the other variables): main()
// prints "error: <message>" and exits 2. Failures of files, devices or computations stay mxmoe::Error
// (exit 1).
class UsageError : public Error {
 public:
  using Error::Error;
};

// Each subcommand registers itself on `app`; when it is the one parsed, its callback runs the
// command and stores the exit code in `exit_code`. A mxmoe::Error thrown by a callback escapes
// CLI::App::parse and main() turns it into "error: <message>" and exit 1.
void add_check_command(CLI::App& app, int& exit_code);
void add_probe_command(CLI::App& app, int& exit_code);
void add_gen_checkpoint_command(CLI::App& app, int& exit_code);
void add_run_command(CLI::App& app, int& exit_code);
void add_bench_command(CLI::App& app, int& exit_code);  // cmd_bench.cu
void add_soak_command(CLI::App& app, int& exit_code);
void add_plan_command(CLI::App& app, int& exit_code);  // cmd_plan.cpp

// --- command-line helpers ----------------------------------------------------------------------
// The valid names joined for help texts: "auto, reference, gemv".
std::string joined(const std::vector<std::string>& names);
// Integer options: the text must be a whole decimal number in [lo, hi]. CLI11 alone wraps "-1" into an
// unsigned option and prints the range of a double for NonNegativeNumber; this names the range instead.
CLI::Validator integer_in(int64_t lo, int64_t hi);
// A --seed: any integer in [0, 2^64).
CLI::Validator seed_value();
// The variables the runner reads (MXMOE_BACKEND, MXMOE_PLAN, MXMOE_TUNE_FILE, MXMOE_LOG), parsed
// before any work: a bad value is a UsageError naming the variable.
void check_environment();
// --output: the file can be created or overwritten (its folder exists and is writable, and it is not
// a folder), checked before the forward so a long run does not end in a failed write.
void check_output_path(const std::string& path);
// Checks a --backend value with mxmoe::parse_backend, so the usage error lists the valid names.
std::string validate_backend_name(std::string& value);
// Checks a --preset value with MoeConfig::preset.
std::string validate_preset_name(std::string& value);
// MXMOE_BACKEND: mxmoe::backend_from_env (runner.hpp).
using mxmoe::backend_from_env;

// The seed given on the command line, or a fresh random one (printed by the caller, so a run can be
// repeated).
uint64_t seed_or_random(const std::optional<uint64_t>& seed);

// --- inputs -------------------------------------------------------------------------------------
// bf16 values drawn from N(0, stddev^2).
std::vector<uint16_t> random_bf16(size_t count, uint64_t seed, double stddev = 1.0);
std::vector<float> random_f32(size_t count, uint64_t seed, double stddev = 1.0);
// Raw little-endian bf16 files (--input / --output).
std::vector<uint16_t> read_bf16_file(const std::string& path);
void write_bf16_file(const std::string& path, std::span<const uint16_t> values);

// --- running ------------------------------------------------------------------------------------
// The result of one forward.
struct ForwardResult {
  std::vector<uint16_t> out;  // [T, H] bf16, on the host
  double milliseconds = 0;    // wall clock of forward() (plus the device synchronisation)
};
// Runs runner.forward once on host inputs. For a GPU backend the inputs go to device memory, the
// output is poisoned with 0xFFFF (a bf16 NaN) first so unwritten elements show, the device is
// synchronised, and the output copied back; every CUDA call is checked (common/cuda_check.hpp) and
// device memory is owned by mxmoe::DeviceBuffer (common/device_buffer.hpp).
ForwardResult run_forward(const MoeRunner& runner, std::span<const uint16_t> hidden,
                          std::span<const float> router_logits, int64_t tokens, cudaStream_t stream = nullptr);

// --- measurements -------------------------------------------------------------------------------
struct ErrorStats {
  double max_abs = 0;       // max |out - ref| over the finite outputs
  double rel = 0;           // ||out - ref|| / ||ref||; NaN when any output is NaN
  int64_t nan_count = 0;
  int64_t worst_index = -1;  // the first NaN, else the largest error
};
ErrorStats compare_to_reference(std::span<const uint16_t> out, std::span<const double> ref);
size_t count_nan_bf16(std::span<const uint16_t> values);

std::string describe_shape(const MoeConfig& config);
// An explicit shape (--experts --top-k --hidden --intermediate) as a validated config named "custom";
// an invalid one is a UsageError naming the field.
MoeConfig custom_config(int experts, int top_k, int hidden, int intermediate);

}  // namespace mxmoe::cli
