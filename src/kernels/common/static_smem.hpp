#pragma once
// The static shared memory of a family's kernel variants: for_each_variant(f) calls f with each
// kernel (and whatever else the family passes along). Needs a CUDA context.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

#include "common/cuda_check.hpp"

namespace mxmoe::kernels {

// The largest among the variants.
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

// Whether every variant's static shared memory plus its dynamic shared memory fits a block:
// for_each_variant(f) calls f(kernel, arg), dynamic_bytes(arg) gives that variant's dynamic bytes.
template <class ForEachVariant, class DynamicBytes>
bool variants_fit(ForEachVariant&& for_each_variant, DynamicBytes&& dynamic_bytes, size_t smem_per_block_optin) {
  bool ok = true;
  for_each_variant([&](auto kernel, auto arg) {
    cudaFuncAttributes attr{};
    MXMOE_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
    ok = ok && attr.sharedSizeBytes + dynamic_bytes(arg) <= smem_per_block_optin;
  });
  return ok;
}

}  // namespace mxmoe::kernels
