#pragma once
// What a GPU's clocks and power did while a benchmark timed it. An H100 running gpt-oss-120b's layer at
// T = 1024 reaches its 700 W cap within a second and the driver lowers the SM clock from 1980 to
// 1400-1800 MHz, so a figure means little without the clock it ran at. The samples come from NVML,
// the driver's libnvidia-ml.so.1, opened at run time: the library and the command still load on a
// machine without the driver, where the monitor reports itself unavailable.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mxmoe {

// NVML's clock event reasons (nvmlClocksEventReason*), the bits that matter here.
inline constexpr uint64_t kClockIdle = 0x1;
inline constexpr uint64_t kClockSwPowerCap = 0x4;
inline constexpr uint64_t kClockHwSlowdown = 0x8;
inline constexpr uint64_t kClockSwThermal = 0x20;
inline constexpr uint64_t kClockHwThermal = 0x40;
inline constexpr uint64_t kClockHwPowerBrake = 0x80;
// The reasons that lower the clock under load (power or heat), as opposed to idling or settings.
inline constexpr uint64_t kClockLimitReasons =
    kClockSwPowerCap | kClockHwSlowdown | kClockSwThermal | kClockHwThermal | kClockHwPowerBrake;

struct GpuSample {
  double sm_mhz = 0;
  double power_w = 0;
  uint64_t reasons = 0;
};

struct GpuSampleSummary {
  int samples = 0;
  double sm_mhz_median = 0, sm_mhz_min = 0;
  double power_w_median = 0;
  uint64_t reasons_seen = 0;   // every reason bit of any sample
  double limited_fraction = 0;  // the samples with a kClockLimitReasons bit
};

// Medians, minimum, reasons; zeros for no samples.
GpuSampleSummary summarize(const std::vector<GpuSample>& samples);

// "sw_power_cap, sw_thermal"; "none" for 0; bits without a name as "0x...".
std::string clock_reason_names(uint64_t reasons);

// Samples one CUDA device every `period_ms` on a background thread between start() and stop(),
// plus one sample at each of the two calls, so even a short timed phase has two.
class GpuMonitor {
 public:
  explicit GpuMonitor(int cuda_device, int period_ms = 20);
  ~GpuMonitor();
  GpuMonitor(const GpuMonitor&) = delete;
  GpuMonitor& operator=(const GpuMonitor&) = delete;

  bool available() const;
  const std::string& why_unavailable() const;  // empty when available
  int max_sm_mhz() const;                       // 0 when unavailable

  void start();
  GpuSampleSummary stop();  // an empty summary when unavailable or not started

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace mxmoe
