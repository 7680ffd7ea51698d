#pragma once
// cp.async.bulk.tensor (PTX ISA "Data Movement: cp.async.bulk.tensor"): one thread moves a box of a
// tensor described by a CUtensorMap (tensor_map.hpp) into shared memory, completing on an mbarrier
// (bulk_copy.cuh) by the box's bytes, zeros outside the tensor included. sm_90 and later (a trap below). The map
// lives in kernel parameter space (a __grid_constant__ parameter); coordinates are in elements,
// innermost first.
#include <cuda.h>

#include <cstdint>

#include "kernels/common/bulk_copy.cuh"

namespace mxmoe::kernels {

__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int c0, int c1, uint64_t* bar) {
#if !MXMOE_HAS_SM90_ASYNC
  (void)dst, (void)map, (void)c0, (void)c1, (void)bar;
  __trap();
#else
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::
          "r"(shared_address(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(shared_address(bar))
      : "memory");
#endif
}

// dst and bar as shared-window addresses (for loops that keep them in 32-bit registers).
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2, uint32_t bar) {
#if !MXMOE_HAS_SM90_ASYNC
  (void)dst, (void)map, (void)c0, (void)c1, (void)c2, (void)bar;
  __trap();
#else
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
#endif
}
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, int c0, int c1, int c2, uint64_t* bar) {
  tma_load_3d(shared_address(dst), map, c0, c1, c2, shared_address(bar));
}

// Fetches the descriptor into the constant cache ahead of the first copy.
__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap* map) {
#if MXMOE_HAS_SM90_ASYNC
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
#else
  (void)map;
#endif
}

}  // namespace mxmoe::kernels
