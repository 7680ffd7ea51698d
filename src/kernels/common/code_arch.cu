// code_arch.hpp: the attributes of an empty kernel, compiled for the build's targets like every other.
#include "kernels/common/code_arch.hpp"

#include <cuda_runtime.h>

#include <atomic>

#include "common/cuda_check.hpp"

namespace mxmoe::kernels {
namespace {

__global__ void code_arch_probe_kernel() {}

constexpr int kMaxDevices = 64;
std::atomic<int> cached[kMaxDevices];  // 0: not read yet

}  // namespace

int code_arch(int device) {
  const bool cacheable = device >= 0 && device < kMaxDevices;
  if (cacheable) {
    if (const int v = cached[device].load(std::memory_order_relaxed); v != 0) return v;
  }
  int current = 0;
  MXMOE_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device) MXMOE_CUDA_CHECK(cudaSetDevice(device));
  cudaFuncAttributes attr{};
  const cudaError_t err = cudaFuncGetAttributes(&attr, code_arch_probe_kernel);
  if (current != device) MXMOE_CUDA_CHECK(cudaSetDevice(current));
  MXMOE_CUDA_CHECK(err);
  if (cacheable) cached[device].store(attr.ptxVersion, std::memory_order_relaxed);
  return attr.ptxVersion;
}

int current_code_arch() {
  int device = 0;
  MXMOE_CUDA_CHECK(cudaGetDevice(&device));
  return code_arch(device);
}

bool runs_sm90_code() { return current_code_arch() >= 90; }

}  // namespace mxmoe::kernels
