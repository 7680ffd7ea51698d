#pragma once
// CUDA error checks: every runtime call and every launch is checked; failures become mxmoe::Error.
#include <cuda_runtime.h>

#include <string>

#include "mxmoe/error.hpp"

namespace mxmoe::detail {

// The error in words. On a machine without an NVIDIA driver the runtime says "CUDA driver version is
// insufficient for CUDA runtime version", which sends people looking for a driver upgrade: say what it
// is instead, and keep "driver too old" for a driver that is there.
inline std::string describe_cuda_error(cudaError_t err) {
  const std::string name = cudaGetErrorName(err);
  int driver = 0;
  const bool no_driver = cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0;
  if (err == cudaErrorNoDevice || (err == cudaErrorInsufficientDriver && no_driver))
    return "no NVIDIA GPU or driver found (" + name + ")";
  if (err == cudaErrorInsufficientDriver) {
    int runtime = 0;
    cudaRuntimeGetVersion(&runtime);
    auto version = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
    return "the NVIDIA driver supports CUDA " + version(driver) + ", older than this build's runtime " +
           version(runtime) + ": update the driver (" + name + ")";
  }
  return name + " (" + cudaGetErrorString(err) + ")";
}

}  // namespace mxmoe::detail

#define MXMOE_CUDA_CHECK(expr)                                                                              \
  do {                                                                                                      \
    const cudaError_t mxmoe_err_ = (expr);                                                                  \
    if (mxmoe_err_ != cudaSuccess)                                                                          \
      ::mxmoe::detail::throw_error("CUDA error ", ::mxmoe::detail::describe_cuda_error(mxmoe_err_), " in ", \
                                   #expr, " at ", __FILE__, ":", __LINE__);                                 \
  } while (0)

// After a kernel launch: catches bad launch configurations without synchronising.
#define MXMOE_CUDA_CHECK_LAUNCH() MXMOE_CUDA_CHECK(cudaPeekAtLastError())
