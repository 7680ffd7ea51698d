// DeviceCaps: the named targets (data) and the probe of a real device.
#include "plan/device_caps.hpp"

#include <cuda_runtime.h>

#include <array>
#include <string>
#include <sstream>

#include "common/cuda_check.hpp"
#include "kernels/common/code_arch.hpp"
#include "kernels/gemv/gemv.hpp"
#include "kernels/mma/mma_gemm.hpp"
#include "kernels/mma/mx_gemm.hpp"
#include "kernels/sm90/wgmma_fp8_gemm.hpp"
#include "kernels/sm90/wgmma_gemm.hpp"
#include "mxmoe/error.hpp"
#include "plan/planner.hpp"

namespace mxmoe::plan {
namespace {

constexpr size_t kKiB = 1024, kMiB = 1024 * 1024;

// Datasheet values (FACTS.md §5 and the vendors' pages), except where a comment says measured. Shared
// memory per block is the opt-in maximum (227 KB on Hopper; 99 KB = 101,376 B on SM120/SM121).
DeviceCaps hopper(const char* name, double bandwidth) {
  DeviceCaps c;
  c.name = name;
  c.cc_major = 9, c.cc_minor = 0;
  c.sm_count = 132;
  c.smem_per_block = 227 * kKiB, c.smem_per_sm = 228 * kKiB;
  c.l2_bytes = 50 * kMiB;
  c.bandwidth = bandwidth;
  c.wgmma = c.clusters = c.bulk_copies = c.fp8_mma_sync = true;
  return c;
}
DeviceCaps sm12x(const char* name, int minor, int sms, size_t l2, double bandwidth) {
  DeviceCaps c;
  c.name = name;
  c.cc_major = 12, c.cc_minor = minor;
  c.sm_count = sms;
  c.smem_per_block = 99 * kKiB, c.smem_per_sm = 100 * kKiB;
  c.l2_bytes = l2;
  c.bandwidth = bandwidth;
  // No wgmma, no clusters beyond 1x1x1 (FACTS.md §5); tensor copies, FP8 and block-scaled mma.sync.
  c.bulk_copies = c.block_scaled_mma = c.fp8_mma_sync = true;
  return c;
}

// Ampere and Ada (sm_80 code; docs/ampere-ada.md): no wgmma, clusters or bulk copies; FP8 mma.sync from
// SM89. smem_per_block: 163 KB on 8.0, 99 KB on 8.6 and 8.9.
DeviceCaps sm8x(const char* name, int minor, int sms, size_t smem_per_block, size_t l2, double bandwidth) {
  DeviceCaps c;
  c.name = name;
  c.cc_major = 8, c.cc_minor = minor;
  c.sm_count = sms;
  c.smem_per_block = smem_per_block, c.smem_per_sm = smem_per_block + kKiB;
  c.l2_bytes = l2;
  c.bandwidth = bandwidth;
  c.fp8_mma_sync = minor >= 9;
  return c;
}

struct Target {
  std::string_view name;
  DeviceCaps caps;
};

const std::array<Target, 8>& targets() {
  static const std::array<Target, 8> table{{
      // H100 SXM: 3.35 TB/s (a streaming read measured 3.0 TB/s on a lent H100, FACTS.md §5).
      {"h100", hopper("h100 (H100 SXM, target)", 3.35e12)},
      // H200 SXM: 4.8 TB/s (a device-to-device copy measured 4.21 TB/s, FACTS.md §5).
      {"h200", hopper("h200 (H200 SXM, target)", 4.8e12)},
      // RTX 5090: 170 SMs, 1.79 TB/s GDDR7, 96 MB L2.
      {"rtx5090", sm12x("rtx5090 (RTX 5090, target)", 0, 170, 96 * kMiB, 1.79e12)},
      // RTX PRO 6000 Blackwell: 188 SMs, 1.79 TB/s GDDR7, 128 MB L2.
      {"rtxpro6000", sm12x("rtxpro6000 (RTX PRO 6000 Blackwell, target)", 0, 188, 128 * kMiB, 1.79e12)},
      // DGX Spark GB10: 48 SMs, 273 GB/s LPDDR5x shared with the CPU; L2 24 MB (reported, not checked).
      {"gb10", sm12x("gb10 (DGX Spark GB10, target)", 1, 48, 24 * kMiB, 273e9)},
      // A100 SXM 80GB: 108 SMs, 2.04 TB/s HBM2e, 40 MB L2, 163 KB shared memory per block.
      {"a100", sm8x("a100 (A100 SXM 80GB, target)", 0, 108, 163 * kKiB, 40 * kMiB, 2.039e12)},
      // RTX 4090: 128 SMs, 1.01 TB/s GDDR6X, 72 MB L2.
      {"rtx4090", sm8x("rtx4090 (RTX 4090, target)", 9, 128, 99 * kKiB, 72 * kMiB, 1.008e12)},
      // L40S: 142 SMs, 864 GB/s GDDR6, 96 MB L2.
      {"l40s", sm8x("l40s (L40S, target)", 9, 142, 99 * kKiB, 96 * kMiB, 864e9)},
  }};
  return table;
}

}  // namespace

std::vector<std::string> target_names() {
  std::vector<std::string> out;
  for (const Target& t : targets()) out.emplace_back(t.name);
  return out;
}

DeviceCaps target_caps(std::string_view name) {
  std::string valid;
  for (const Target& t : targets()) {
    if (t.name == name) {
      DeviceCaps c = t.caps;
      c.gemv_static_smem = kStaticSmemAllowance;
      c.is_target = true;
      return c;
    }
    valid += (valid.empty() ? "" : ", ") + std::string(t.name);
  }
  detail::throw_error("target: unknown name '", name, "'; valid targets are: ", valid);
}

DeviceCaps probe_caps(int device) {
  cudaDeviceProp prop{};
  MXMOE_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  int cluster_launch = 0, bus_width = 0, mem_clock_khz = 0;
  MXMOE_CUDA_CHECK(cudaDeviceGetAttribute(&cluster_launch, cudaDevAttrClusterLaunch, device));
  MXMOE_CUDA_CHECK(cudaDeviceGetAttribute(&bus_width, cudaDevAttrGlobalMemoryBusWidth, device));
  MXMOE_CUDA_CHECK(cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, device));
  DeviceCaps c;
  c.name = prop.name;
  // The features are the code's (kernels/common/code_arch.hpp): a build without this device's target
  // runs an older one (compute_80 PTX on a Hopper), and plans as a GPU of that compute capability would.
  const int code = kernels::code_arch(device);
  c.cc_major = code / 10, c.cc_minor = code % 10;
  c.sm_count = prop.multiProcessorCount;
  c.smem_per_block = prop.sharedMemPerBlockOptin;
  c.smem_per_sm = prop.sharedMemPerMultiprocessor;
  c.l2_bytes = static_cast<size_t>(prop.l2CacheSize);
  c.bandwidth = 2.0 * mem_clock_khz * 1e3 * bus_width / 8;  // double data rate; a lead, not a measurement
  c.wgmma = c.cc_major == 9 && c.cc_minor == 0;
  // SM120/SM121 take clusters of 1x1x1 only (FACTS.md §5), whatever the launch attribute says.
  c.clusters = cluster_launch != 0 && c.cc_major >= 9 && c.cc_major != 12;
  c.bulk_copies = c.cc_major >= 9;
  c.block_scaled_mma = c.cc_major == 12;
  c.fp8_mma_sync = code >= 89;
  c.gemv_static_smem = gemv::static_smem_bytes();
  return c;
}

// The tile table's rows that this build has and that run on the device's architecture; the tensor-core
// tiles by the kernels' own attributes (their static shared memory measured).
Fits fits_on_device(int device, const DeviceCaps& caps) {
  using kernels::TileFamily;
  const uint8_t arch = kernels::arch_of(caps.cc_major, caps.cc_minor);
  Fits f;
  f.mma = kernels::rows_on(TileFamily::Mma, arch) > 0 && mma::fits(caps.smem_per_block);
  f.wgmma = sm90::wgmma_runs(device);
  f.wgmma_fp8 = sm90::wgmma_fp8_runs(device);
  f.mx = kernels::rows_on(TileFamily::Mx, arch) > 0 && kernels::rows_fit(TileFamily::Mx, arch, caps.smem_per_block, 0);
  return f;
}

std::string describe(const DeviceCaps& c) {
  std::ostringstream os;
  os << c.name << " (" << c.cc_major << "." << c.cc_minor << ", " << c.sm_count << " SMs, "
     << c.smem_per_block / kKiB << " KB smem/block, L2 " << c.l2_bytes / kMiB << " MB, "
     << c.bandwidth / 1e9 << " GB/s";
  for (const auto& [on, what] : {std::pair{c.wgmma, "wgmma"}, std::pair{c.clusters, "clusters"},
                                 std::pair{c.block_scaled_mma, "block-scaled mma"}, std::pair{c.fp8_mma_sync, "fp8 mma.sync"}})
    if (on) os << ", " << what;
  os << ")";
  return os.str();
}

}  // namespace mxmoe::plan
