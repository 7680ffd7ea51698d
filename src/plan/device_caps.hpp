#pragma once
// What the planner may know of a GPU: DeviceCaps, filled once by probing the device, or taken from a
// named target (h100, h200, rtx5090, rtxpro6000, gb10, a100, rtx4090, l40s) so that any machine can plan
// for any of them (`mxmoe plan --target gb10`). Everything that chooses reads caps, never the device.
// A probed device's compute capability and features are those of the code it runs (code_arch.hpp).
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/tile_table.hpp"

namespace mxmoe::plan {

struct DeviceCaps {
  std::string name;                  // the device's name, or the target's
  int cc_major = 0, cc_minor = 0;    // compute capability (of the code the device runs)
  int sm_count = 0;
  size_t smem_per_block = 0;         // opt-in shared memory per block, bytes
  size_t smem_per_sm = 0;            // shared memory per SM, bytes
  size_t l2_bytes = 0;
  double bandwidth = 0;              // memory bandwidth, bytes/s (datasheet, or measured where noted)
  // Features the kernel families use.
  bool wgmma = false;                // warpgroup MMA (sm_90a; compute capability 9.0 only)
  bool clusters = false;             // thread-block clusters larger than 1x1x1
  bool bulk_copies = false;          // cp.async.bulk and tensor copies (SM90 and newer)
  bool block_scaled_mma = false;     // mma.sync ... kind::mxf8f6f4.block_scale (SM120/SM121)
  bool fp8_mma_sync = false;         // mma.sync with e4m3 operands (SM89 and newer; Hopper lowers it to HMMA)
  // The kernels' static shared memory: measured on a device (the GEMV family's variants), or for a
  // target the allowance kStaticSmemAllowance, which a GPU test holds the measured value to.
  size_t gemv_static_smem = 0;
  bool is_target = false;            // from the target table, not a probed device
};

// Allowances for the kernels' static shared memory when planning for a target without its GPU: the
// GEMV kernels' (split-K partials, barriers, the local routing, the cluster rows), and the tensor-core
// tiles' (the m-tile, its rows' offsets, barriers: the tile table's, which checks every SM12x row
// against it). GPU tests hold the measured static sizes to these (test_gpu_planner.cpp).
inline constexpr size_t kStaticSmemAllowance = 8192;
using kernels::kTileStaticSmemAllowance;

// The named targets (datasheet values of FACTS.md §5; the source of each value is in targets.cpp).
std::vector<std::string> target_names();
// A target's caps; an unknown name is an Error listing the valid ones.
DeviceCaps target_caps(std::string_view name);
// The caps of CUDA device `device` (queries the runtime and the GEMV kernels' attributes).
DeviceCaps probe_caps(int device);
// Whether this build's tiles fit CUDA device `device` and run there, from the kernels' own attributes
// (planner.hpp's Fits; fits_for_caps is the same for a target, with the static allowance).
struct Fits;
Fits fits_on_device(int device, const DeviceCaps& caps);
// One line: "NVIDIA H100 80GB HBM3 (9.0, 132 SMs, 227 KB smem/block, wgmma, clusters)".
std::string describe(const DeviceCaps& caps);

}  // namespace mxmoe::plan
