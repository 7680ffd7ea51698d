// Record metadata of the benchmark commands (bench_record.hpp).
#include "bench_record.hpp"

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "mxmoe_git_commit.hpp"  // generated at every build (git_commit.cmake)

namespace mxmoe::cli::bench {

std::string commit_id() {
  const char* env = std::getenv("MXMOE_COMMIT");
  return env != nullptr && *env != '\0' ? env : MXMOE_GIT_COMMIT;
}

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

std::string clock_note(const GpuSampleSummary& g) {
  if (g.samples == 0) return "";
  std::ostringstream out;
  out << " at " << std::fixed << std::setprecision(0) << g.sm_mhz_median << " MHz";
  if (g.limited_fraction > 0)
    out << ", " << clock_reason_names(g.reasons_seen & kClockLimitReasons) << " in " << 100 * g.limited_fraction
        << "% of samples";
  return out.str();
}

}  // namespace mxmoe::cli::bench
