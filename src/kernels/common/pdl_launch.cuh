#pragma once
// Launch with programmatic dependent launch (programmatic stream serialization): the kernel may
// start before its predecessor in the stream finishes, so it must call
// cudaGridDependencySynchronize() before reading anything the predecessor writes.
// docs/gpu-pipeline.md states the ordering rule all mxmoe kernels follow.
#include <cuda_runtime.h>

#include <utility>

#include "moe/cuda_check.hpp"

namespace mxmoe::kernels {

template <class... KernelArgs, class... Args>
void launch_with_pdl(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream,
                     Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attr;
  config.numAttrs = 1;
  MXMOE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace mxmoe::kernels
