#pragma once
// Functions that kernels and CPU code share (layouts, offsets) are constexpr and marked with this:
// __host__ __device__ under nvcc, nothing for the host compiler.
#if defined(__CUDACC__)
#define MXMOE_HOST_DEVICE __host__ __device__
#else
#define MXMOE_HOST_DEVICE
#endif
