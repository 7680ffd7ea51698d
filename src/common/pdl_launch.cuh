#pragma once
// Launch with programmatic dependent launch (programmatic stream serialization): the kernel may
// start before its predecessor in the stream finishes, so it must call pdl_wait() before reading
// anything the predecessor writes, and pdl_trigger() lets its own dependant start.
// docs/gpu-pipeline.md states the ordering rule all mxmoe kernels follow.
//
// PDL is sm_90's (griddepcontrol). Code built for an older target (sm_80/86/89) has neither call and is
// launched without the attribute (runs_sm90_code), so stream order does what the wait would have done.
#include <cuda_runtime.h>

#include <utility>

#include "kernels/common/code_arch.hpp"
#include "common/cuda_check.hpp"
#include "kernels/common/arch_features.cuh"

namespace mxmoe::kernels {

// cudaGridDependencySynchronize() and cudaTriggerProgrammaticLaunchCompletion(), which do not compile
// for targets below sm_90.
__device__ __forceinline__ void pdl_wait() {
#if MXMOE_HAS_SM90_ASYNC
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if MXMOE_HAS_SM90_ASYNC
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

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
  unsigned n = 0;
  if (runs_sm90_code()) {
    attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster.x * cluster.y * cluster.z > 1) {
    attrs[n].id = cudaLaunchAttributeClusterDimension;
    attrs[n].val.clusterDim.x = cluster.x;
    attrs[n].val.clusterDim.y = cluster.y;
    attrs[n++].val.clusterDim.z = cluster.z;
  }
  config.attrs = attrs;
  config.numAttrs = n;
  MXMOE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

template <class... KernelArgs, class... Args>
void launch_with_pdl(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream,
                     Args&&... args) {
  launch_with_pdl_in_clusters(kernel, grid, block, smem_bytes, stream, dim3(1, 1, 1), std::forward<Args>(args)...);
}

}  // namespace mxmoe::kernels
