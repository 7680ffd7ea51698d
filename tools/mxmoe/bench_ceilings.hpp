#pragma once
// The ceilings `mxmoe bench` reads its rows against, measured on the same device (and SMs) at start:
// the copy bandwidth of a kernel and cuBLAS's bf16 GEMM rate, each timed as the layer is
// (bench_timing.hpp), with the clocks it ran at.
#include <cuda_runtime.h>

#include "gpu_monitor.hpp"

namespace mxmoe::cli::bench {

// A measured ceiling and the clocks it ran at.
struct Ceiling {
  double rate = 0;
  GpuSampleSummary gpu;
};

// Device-to-device copy of 1 GiB by a kernel (a graph memcpy node may go to the slower copy
// engine); bytes read plus bytes written per second, GB/s.
Ceiling measure_copy(cudaStream_t stream, int sm_count, double warmup_ms, GpuMonitor& monitor);

// cuBLAS bf16 GEMM (fp32 accumulate), 8192^3, random data: TFLOP/s.
Ceiling measure_bf16(cudaStream_t stream, double warmup_ms, GpuMonitor& monitor);

}  // namespace mxmoe::cli::bench
