#pragma once
// `mxmoe bench --tune`: every batch size timed with each tile of the tile table that a tune table can
// select (plan::tune_candidates: the GEMV batches, the register-decode, swap-AB and, on Hopper, wgmma
// tiles this build has; those this device cannot run are skipped), the fastest kept, and the choices
// written as the preference table (plan/tune_table.hpp) that the runner reads from
// RunnerOptions::tune_file or MXMOE_TUNE_FILE.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bench_timing.hpp"
#include "common/device_buffer.hpp"
#include "gpu_monitor.hpp"
#include "mxmoe/config.hpp"
#include "mxmoe/device.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe::cli::bench {

// What --tune times and where its table goes.
struct TuneRequest {
  std::string path;             // the table's file
  std::vector<int64_t> tokens;  // batch sizes (those above 0 are timed, in increasing order)
  WarmUp warmup;                // of each timing
  int iterations = 0;           // timed replays of each timing (median)
};

// Times each candidate on `layers` rotated copies of `host` with the bench's device inputs (hidden
// [T_max, H] bf16, one router-logits buffer per layer, the output [T_max, H] bf16), prints the times
// per batch size and the choice, and writes the table to request.path. Each candidate is forced
// through RunnerOptions::plan (mxmoe/plan_override.hpp) and named by that override. Boundaries between
// choices sit at the geometric mean of the rows per expert of the batch sizes on either side.
void write_tune_table(const TuneRequest& request, const MoeConfig& cfg, const GpuInfo& gpu, const MoeLayerData& host,
                      int layers, const DeviceBuffer& d_hidden, const DeviceBuffer& d_out,
                      const std::vector<DeviceBuffer>& d_logits, cudaStream_t stream, GpuMonitor& monitor);

}  // namespace mxmoe::cli::bench
