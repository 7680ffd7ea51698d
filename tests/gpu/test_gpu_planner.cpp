// The planner against the GPU at hand: the caps a target's plans assume hold on the real device. The
// static shared memory the target allowances stand for is at most the allowance; the fits computed from
// the allowances agree with the kernels' own attributes, here and at SM120/SM121's 101,376 bytes per
// block; and where the device is an H100 or H200, the named target plans exactly as the probed device.
#include <gtest/gtest.h>

#include "gpu_test_support.hpp"
#include "kernels/gemv/gemv.hpp"
#include "kernels/mma/mma_gemm.hpp"
#include "plan/device_caps.hpp"
#include "plan/planner.hpp"

namespace mxmoe::plan {
namespace {

TEST(GpuPlanner, StaticSharedMemoryIsWithinTheTargetAllowances) {
  MXMOE_SKIP_WITHOUT_GPU();
  const DeviceCaps caps = probe_caps(0);
  EXPECT_LE(caps.gemv_static_smem, kStaticSmemAllowance);
  // The tensor-core tiles, with their real static sizes, at an SM12x budget and this device's.
  DeviceCaps sm12x = caps;
  sm12x.smem_per_block = 101376;
  EXPECT_EQ(fits_for_caps(sm12x).mma, mma::fits(101376)) << "the allowance misjudges SM12x's 99 KB";
  EXPECT_TRUE(mma::fits(101376)) << "every tensor-core tile must fit SM120/SM121";
  const Fits on_device = fits_on_device(0, caps), from_caps = fits_for_caps(caps);
  EXPECT_EQ(from_caps.mma, on_device.mma);
  EXPECT_EQ(from_caps.wgmma, on_device.wgmma);
  EXPECT_EQ(from_caps.mx, on_device.mx);
}

TEST(GpuPlanner, TheNamedHopperTargetPlansAsTheProbedDevice) {
  MXMOE_SKIP_WITHOUT_GPU();
  const DeviceCaps caps = probe_caps(0);
  if (caps.cc_major != 9 || caps.sm_count != 132) GTEST_SKIP() << "not a 132-SM Hopper: " << describe(caps);
  for (const char* preset : {"gpt-oss-20b", "gpt-oss-120b"})
    for (const Backend backend : {Backend::Auto, Backend::Gemv, Backend::Mma}) {
      PlannerInput device{caps, fits_on_device(0, caps), MoeConfig::preset(preset), backend, {}, {}};
      PlannerInput target = device;
      target.caps = target_caps("h100");
      target.fits = fits_for_caps(target.caps);
      const Planner a(device), b(target);
      for (int64_t t = 0; t <= 8192; t = t < 64 ? t + 1 : t * 2)
        ASSERT_EQ(a.plan(t), b.plan(t)) << preset << " " << to_string(backend) << " T = " << t << ": "
                                        << a.plan(t).to_string() << " / " << b.plan(t).to_string();
    }
}

}  // namespace
}  // namespace mxmoe::plan
