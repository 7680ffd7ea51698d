#pragma once
// CUDA error checks: every runtime call and every launch is checked; failures become mxmoe::Error.
#include <cuda_runtime.h>

#include "mxmoe/error.hpp"

#define MXMOE_CUDA_CHECK(expr)                                                                           \
  do {                                                                                                   \
    const cudaError_t mxmoe_err_ = (expr);                                                               \
    if (mxmoe_err_ != cudaSuccess)                                                                       \
      ::mxmoe::detail::throw_error("CUDA error ", cudaGetErrorName(mxmoe_err_), " (",                    \
                                   cudaGetErrorString(mxmoe_err_), ") in ", #expr, " at ", __FILE__, ":", \
                                   __LINE__);                                                            \
  } while (0)

// After a kernel launch: catches bad launch configurations without synchronising.
#define MXMOE_CUDA_CHECK_LAUNCH() MXMOE_CUDA_CHECK(cudaPeekAtLastError())
