#pragma once
// Launch with programmatic dependent launch (programmatic stream serialization): the kernel may
// start before its predecessor in the stream finishes, so it must call
// cudaGridDependencySynchronize() before reading anything the predecessor writes.
// docs/gpu-pipeline.md states the ordering rule all mxmoe kernels follow.
#include <cuda_runtime.h>

#include <utility>

#include "common/cuda_check.hpp"

namespace mxmoe::kernels {

// cluster: thread-block cluster dimensions, or all ones for none.
template <class... KernelArgs, class... Args>
void launch_with_pdl_in_clusters(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem_bytes,
                                 cudaStream_t stream, dim3 cluster, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  cudaLaunchAttribute attrs[2]{};
  attrs[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[0].val.programmaticStreamSerializationAllowed = 1;
  attrs[1].id = cudaLaunchAttributeClusterDimension;
  attrs[1].val.clusterDim.x = cluster.x;
  attrs[1].val.clusterDim.y = cluster.y;
  attrs[1].val.clusterDim.z = cluster.z;
  config.attrs = attrs;
  config.numAttrs = cluster.x * cluster.y * cluster.z > 1 ? 2 : 1;
  MXMOE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

template <class... KernelArgs, class... Args>
void launch_with_pdl(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream,
                     Args&&... args) {
  launch_with_pdl_in_clusters(kernel, grid, block, smem_bytes, stream, dim3(1, 1, 1), std::forward<Args>(args)...);
}

}  // namespace mxmoe::kernels
