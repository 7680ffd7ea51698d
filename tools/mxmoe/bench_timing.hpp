#pragma once
// How `mxmoe bench` times work on the GPU: enqueued once on a stream, captured in a CUDA graph,
// replayed untimed to warm the chip up, then replayed under CUDA events; the median replay and the
// clocks and power sampled meanwhile (gpu_monitor.hpp). Also the progress bar of its sweeps.
#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "gpu_monitor.hpp"

namespace mxmoe::cli::bench {

// The middle value after sorting (the upper middle of an even count); 0 for none.
double median(std::vector<double> v);

struct WarmUp {
  int replays = 0;  // at least this many
  double ms = 0;    // and for at least this long
};

struct Timing {
  double ms = 0;          // median replay
  GpuSampleSummary gpu;   // the clocks and power of the timed replays
};

// Times `body` (enqueued on `stream`) captured in a graph: median over `iterations` replays, ms. The
// warm-up replays are synchronised one by one as the timed ones are, so the chip warms up under the
// same duty cycle that is then timed.
Timing time_graph(cudaStream_t stream, WarmUp warmup, int iterations, GpuMonitor& monitor,
                  const std::function<void()>& body);

// "[#####.........................] 3/11 batch sizes" on stderr, redrawn in place; a newline once
// done == total.
void progress(size_t done, size_t total, const std::string& what);

}  // namespace mxmoe::cli::bench
