// GpuMonitor: NVML by dlopen (moe/gpu_monitor.hpp says why). The few entry points used are NVML's
// stable C API; their signatures are declared here so that the build needs no NVML header.
#include "gpu_monitor.hpp"

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <sstream>
#include <thread>
#include <type_traits>

namespace mxmoe {
namespace {

using NvmlDevice = void*;
constexpr int kNvmlSuccess = 0;
constexpr int kNvmlClockSm = 1;

struct Nvml {
  void* lib = nullptr;
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  int (*handle_by_pci)(const char*, NvmlDevice*) = nullptr;
  int (*clock)(NvmlDevice, int, unsigned*) = nullptr;
  int (*max_clock)(NvmlDevice, int, unsigned*) = nullptr;
  int (*power_mw)(NvmlDevice, unsigned*) = nullptr;
  int (*reasons)(NvmlDevice, unsigned long long*) = nullptr;
};

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

GpuSampleSummary summarize(const std::vector<GpuSample>& samples) {
  GpuSampleSummary s;
  s.samples = static_cast<int>(samples.size());
  if (samples.empty()) return s;
  std::vector<double> mhz, watts;
  int limited = 0;
  for (const GpuSample& x : samples) {
    mhz.push_back(x.sm_mhz);
    watts.push_back(x.power_w);
    s.reasons_seen |= x.reasons;
    limited += (x.reasons & kClockLimitReasons) != 0;
  }
  s.sm_mhz_min = *std::min_element(mhz.begin(), mhz.end());
  s.sm_mhz_median = median_of(std::move(mhz));
  s.power_w_median = median_of(std::move(watts));
  s.limited_fraction = static_cast<double>(limited) / static_cast<double>(samples.size());
  return s;
}

std::string clock_reason_names(uint64_t reasons) {
  static constexpr struct {
    uint64_t bit;
    const char* name;
  } kNames[] = {{kClockIdle, "idle"},
                {0x2, "applications_clocks"},
                {kClockSwPowerCap, "sw_power_cap"},
                {kClockHwSlowdown, "hw_slowdown"},
                {0x10, "sync_boost"},
                {kClockSwThermal, "sw_thermal"},
                {kClockHwThermal, "hw_thermal"},
                {kClockHwPowerBrake, "hw_power_brake"},
                {0x100, "display_clocks"}};
  if (reasons == 0) return "none";
  std::ostringstream out;
  const char* separator = "";
  for (const auto& n : kNames)
    if (reasons & n.bit) {
      out << separator << n.name;
      separator = ", ";
      reasons &= ~n.bit;
    }
  if (reasons != 0) out << separator << "0x" << std::hex << reasons;
  return out.str();
}

struct GpuMonitor::State {
  Nvml nvml;
  NvmlDevice device = nullptr;
  std::string why;
  int max_mhz = 0;
  int period_ms = 20;
  std::thread thread;
  std::atomic<bool> running{false};
  std::mutex mutex;  // guards samples
  std::vector<GpuSample> samples;

  GpuSample sample() const {
    GpuSample s;
    unsigned mhz = 0, mw = 0;
    unsigned long long reasons = 0;
    if (nvml.clock(device, kNvmlClockSm, &mhz) == kNvmlSuccess) s.sm_mhz = mhz;
    if (nvml.power_mw(device, &mw) == kNvmlSuccess) s.power_w = mw / 1000.0;
    if (nvml.reasons(device, &reasons) == kNvmlSuccess) s.reasons = reasons;
    return s;
  }
  void record() {
    const GpuSample s = sample();
    const std::lock_guard lock(mutex);
    samples.push_back(s);
  }
};

GpuMonitor::GpuMonitor(int cuda_device, int period_ms) : state_(std::make_unique<State>()) {
  State& st = *state_;
  st.period_ms = std::max(period_ms, 1);
  Nvml& n = st.nvml;
  n.lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (n.lib == nullptr) {
    st.why = "libnvidia-ml.so.1 not found (no NVIDIA driver)";
    return;
  }
  auto symbol = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(n.lib, name));
    return fn != nullptr;
  };
  // Drivers before 535 name the reasons "throttle" reasons.
  const bool found = symbol(n.init, "nvmlInit_v2") && symbol(n.shutdown, "nvmlShutdown") &&
                     symbol(n.handle_by_pci, "nvmlDeviceGetHandleByPciBusId_v2") &&
                     symbol(n.clock, "nvmlDeviceGetClockInfo") && symbol(n.max_clock, "nvmlDeviceGetMaxClockInfo") &&
                     symbol(n.power_mw, "nvmlDeviceGetPowerUsage") &&
                     (symbol(n.reasons, "nvmlDeviceGetCurrentClocksEventReasons") ||
                      symbol(n.reasons, "nvmlDeviceGetCurrentClocksThrottleReasons"));
  char bus_id[32] = {};
  if (!found) {
    st.why = "libnvidia-ml.so.1 lacks an entry point this monitor uses";
  } else if (n.init() != kNvmlSuccess) {
    st.why = "nvmlInit failed";
    n.init = nullptr;  // nothing to shut down
  } else if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, cuda_device) != cudaSuccess) {
    cudaGetLastError();
    st.why = "no PCI bus id for CUDA device " + std::to_string(cuda_device);
  } else if (n.handle_by_pci(bus_id, &st.device) != kNvmlSuccess) {
    st.why = std::string("NVML does not know the device at ") + bus_id;
  } else {
    unsigned mhz = 0;
    if (n.max_clock(st.device, kNvmlClockSm, &mhz) == kNvmlSuccess) st.max_mhz = static_cast<int>(mhz);
    return;
  }
  if (n.init != nullptr && n.shutdown != nullptr && found) n.shutdown();
  dlclose(n.lib);
  n.lib = nullptr;
}

GpuMonitor::~GpuMonitor() {
  stop();
  if (state_->nvml.lib != nullptr) {
    state_->nvml.shutdown();
    dlclose(state_->nvml.lib);
  }
}

bool GpuMonitor::available() const { return state_->why.empty(); }
const std::string& GpuMonitor::why_unavailable() const { return state_->why; }
int GpuMonitor::max_sm_mhz() const { return state_->max_mhz; }

void GpuMonitor::start() {
  State& st = *state_;
  if (!available() || st.running) return;
  st.samples.clear();
  st.record();
  st.running = true;
  st.thread = std::thread([&st] {
    while (st.running) {
      std::this_thread::sleep_for(std::chrono::milliseconds(st.period_ms));
      if (st.running) st.record();
    }
  });
}

GpuSampleSummary GpuMonitor::stop() {
  State& st = *state_;
  if (!st.running) return {};
  st.record();
  st.running = false;
  st.thread.join();
  return summarize(st.samples);
}

}  // namespace mxmoe
