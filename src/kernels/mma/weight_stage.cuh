#pragma once
// The weight half of a tensor-core pipeline stage: chunk c's records (gemv_layout.hpp) of the block's
// tiles [tile0, tile0 + tiles_per_block), by cp.async, 16 bytes per thread and step. Tiles past the
// GEMM's last are left alone (their warps do not compute). Shared by the Bf16Atom and MX kernels.
#include <cstdint>

#include "kernels/common/cp_async.cuh"
#include "kernels/gemv/gemv_layout.hpp"

namespace mxmoe::mma {

template <int kTilesPerBlock, int kThreads>
__device__ __forceinline__ void load_weight_records(uint8_t* stage, const uint8_t* expert_weights, int tile0,
                                                    int tiles, int chunks, int c) {
  constexpr int kGranules = gemv::kChunkBytes / 16;
  constexpr int kTotal = kTilesPerBlock * kGranules;
  // A fixed trip count, unrolled (a loop from threadIdx.x compiles to a generic loop with a remainder).
#pragma unroll 1
  for (int round = 0; round < (kTotal + kThreads - 1) / kThreads; ++round) {
    const int i = threadIdx.x + round * kThreads;
    if (kTotal % kThreads != 0 && i >= kTotal) break;
    const int j = i / kGranules, off = (i - j * kGranules) * 16;
    if (tile0 + j < tiles)
      kernels::cp_async_16(stage + j * gemv::kChunkBytes + off,
                           expert_weights + (static_cast<int64_t>(tile0 + j) * chunks + c) * gemv::kChunkBytes + off,
                           true);
  }
}

}  // namespace mxmoe::mma
