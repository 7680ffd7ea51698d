#pragma once
// The largest static shared memory among a family's kernel variants: for_each_variant(f) calls f
// with each kernel (and whatever else the family passes along). Needs a CUDA context.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

#include "moe/cuda_check.hpp"

namespace mxmoe::kernels {

template <class ForEachVariant>
size_t max_static_smem(ForEachVariant&& for_each_variant) {
  size_t most = 0;
  for_each_variant([&](auto kernel, auto&&...) {
    cudaFuncAttributes attr{};
    MXMOE_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
    most = std::max(most, attr.sharedSizeBytes);
  });
  return most;
}

}  // namespace mxmoe::kernels
