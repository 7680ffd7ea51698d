// The benchmark's clock and power monitor: its summary and reason names, and that it reports itself
// unavailable (never crashes) where there is no NVIDIA driver.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpu_monitor.hpp"
#include "mxmoe/device.hpp"

namespace {

using mxmoe::GpuSample;

TEST(GpuMonitor, SummaryTakesMediansMinimumAndEveryReason) {
  const std::vector<GpuSample> samples = {{1980, 300, 0},
                                          {1755, 690, mxmoe::kClockSwPowerCap},
                                          {1560, 700, mxmoe::kClockSwPowerCap | mxmoe::kClockSwThermal},
                                          {1980, 150, mxmoe::kClockIdle},
                                          {1830, 650, 0}};
  const mxmoe::GpuSampleSummary s = mxmoe::summarize(samples);
  EXPECT_EQ(s.samples, 5);
  EXPECT_EQ(s.sm_mhz_median, 1830);
  EXPECT_EQ(s.sm_mhz_min, 1560);
  EXPECT_EQ(s.power_w_median, 650);
  EXPECT_EQ(s.reasons_seen, mxmoe::kClockSwPowerCap | mxmoe::kClockSwThermal | mxmoe::kClockIdle);
  EXPECT_DOUBLE_EQ(s.limited_fraction, 2.0 / 5.0);  // idle lowers no clock under load
}

TEST(GpuMonitor, SummaryOfNothingIsEmpty) {
  const mxmoe::GpuSampleSummary s = mxmoe::summarize({});
  EXPECT_EQ(s.samples, 0);
  EXPECT_EQ(s.sm_mhz_median, 0);
  EXPECT_EQ(s.reasons_seen, 0u);
  EXPECT_EQ(s.limited_fraction, 0);
}

TEST(GpuMonitor, ReasonNames) {
  EXPECT_EQ(mxmoe::clock_reason_names(0), "none");
  EXPECT_EQ(mxmoe::clock_reason_names(mxmoe::kClockSwPowerCap), "sw_power_cap");
  EXPECT_EQ(mxmoe::clock_reason_names(mxmoe::kClockSwPowerCap | mxmoe::kClockHwThermal | mxmoe::kClockIdle),
            "idle, sw_power_cap, hw_thermal");
  EXPECT_EQ(mxmoe::clock_reason_names(mxmoe::kClockHwSlowdown | 0x10000), "hw_slowdown, 0x10000");
}

TEST(GpuMonitor, SamplesWhereADriverIsAndSaysWhyNotElsewhere) {
  mxmoe::GpuMonitor monitor(0, 5);
  if (!mxmoe::gpu_available()) {
    EXPECT_FALSE(monitor.available());
  }
  if (!monitor.available()) {
    EXPECT_FALSE(monitor.why_unavailable().empty());
    EXPECT_EQ(monitor.max_sm_mhz(), 0);
    monitor.start();
    EXPECT_EQ(monitor.stop().samples, 0);
    return;
  }
  EXPECT_TRUE(monitor.why_unavailable().empty());
  EXPECT_GT(monitor.max_sm_mhz(), 0);
  EXPECT_EQ(monitor.stop().samples, 0) << "stop before start";
  monitor.start();
  const mxmoe::GpuSampleSummary s = monitor.stop();
  EXPECT_GE(s.samples, 2);  // one at start, one at stop
  EXPECT_GT(s.sm_mhz_median, 0);
  EXPECT_LE(s.sm_mhz_median, monitor.max_sm_mhz() * 1.01);
  monitor.start();  // a monitor can be started again
  EXPECT_GE(monitor.stop().samples, 2);
}

}  // namespace
