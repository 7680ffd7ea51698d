#pragma once
// The start of a block of either wgmma family (wgmma_gemm_kernel.cu, wgmma_fp8_gemm_kernel.cu): thread 0
// prefetches the launch's tensor maps and initialises the ring's barriers.
#include <cuda.h>

#include <cstdint>

#include "kernels/common/bulk_copy.cuh"
#include "kernels/common/tma.cuh"

namespace mxmoe::sm90 {

// Thread 0's part: the maps (the weights', `extra` unless null, the activations' and the narrower
// paths'), and the ring's barriers: full[s] completes on one arrival and the stage's copies, empty[s] on
// one arrival per warp. `Maps` holds weights, act and act_narrow[S::kNarrowPaths].
template <class S, int kStages, class Maps>
__device__ __forceinline__ void init_ring(const Maps& maps, const CUtensorMap* extra, uint64_t (&full)[kStages],
                                          uint64_t (&empty)[kStages], uint32_t warps) {
  kernels::tma_prefetch_map(&maps.weights);
  if (extra != nullptr) kernels::tma_prefetch_map(extra);
  kernels::tma_prefetch_map(&maps.act);
#pragma unroll
  for (int p = 0; p < S::kNarrowPaths; ++p) kernels::tma_prefetch_map(&maps.act_narrow[p]);
  for (int s = 0; s < kStages; ++s) {
    kernels::mbarrier_init(&full[s], 1);
    kernels::mbarrier_init(&empty[s], warps);
  }
  kernels::fence_barrier_init();
}

}  // namespace mxmoe::sm90
