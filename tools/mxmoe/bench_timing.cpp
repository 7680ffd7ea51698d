// Graph timing of `mxmoe bench` (bench_timing.hpp).
#include "bench_timing.hpp"

#include <algorithm>
#include <chrono>
#include <iostream>

#include "common/cuda_check.hpp"

namespace mxmoe::cli::bench {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

Timing time_graph(cudaStream_t stream, WarmUp warmup, int iterations, GpuMonitor& monitor,
                  const std::function<void()>& body) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  MXMOE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  body();
  MXMOE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  MXMOE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t start, stop;
  MXMOE_CUDA_CHECK(cudaEventCreate(&start));
  MXMOE_CUDA_CHECK(cudaEventCreate(&stop));
  const auto warm_start = std::chrono::steady_clock::now();
  for (int i = 0; i < warmup.replays ||
                  std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - warm_start).count() <
                      warmup.ms;
       ++i) {
    MXMOE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    MXMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  monitor.start();
  std::vector<double> times;
  for (int i = 0; i < iterations; ++i) {
    MXMOE_CUDA_CHECK(cudaEventRecord(start, stream));
    MXMOE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    MXMOE_CUDA_CHECK(cudaEventRecord(stop, stream));
    MXMOE_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    MXMOE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  Timing timing{median(times), monitor.stop()};
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return timing;
}

void progress(size_t done, size_t total, const std::string& what) {
  const int width = 30;
  const int filled = static_cast<int>(width * done / std::max<size_t>(total, 1));
  std::cerr << "\r[" << std::string(filled, '#') << std::string(width - filled, '.') << "] " << done << "/" << total
            << " " << what << "        " << std::flush;
  if (done == total) std::cerr << "\n";
}

}  // namespace mxmoe::cli::bench
