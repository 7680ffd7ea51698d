#pragma once
// Split-K of the FP8 wgmma tiles (wgmma_fp8_gemm.hpp) across a thread-block cluster: at decode sizes a
// GEMM has fewer blocks than the SMs hold (gpt-oss-120b at T = 1: 92 and 48) and each walks every chunk
// of K through its ring, latency-bound. With `splits` > 1 the blocks of one tile set form a cluster of
// `splits`, rank r runs chunks [split_begin(r), split_begin(r + 1)), and rank 0 adds the others' partial
// sums in rank order before the epilogue: a fixed order (the same bits on every run), no workspace, no
// counters, nothing to clear between forwards.
#include <cstdint>

#include "kernels/common/cluster.cuh"

namespace mxmoe::sm90 {

// The first chunk of split `split` of `splits` over `chunks` (balanced: each split at least one chunk
// when splits <= chunks).
__host__ __device__ constexpr int split_begin(int split, int splits, int chunks) { return split * chunks / splits; }

// After the main loop, with this warpgroup's wgmmas retired: rank `rank`'s partial sums acc[0, kN / 2)
// (the path's accumulators) go into its own ring (`ring`, free once every warpgroup of the block is done
// with it); rank 0 adds ranks 1 .. splits - 1's to its own in rank order, a float4 at a time in shared
// memory (a runtime loop: the accumulators are stored meanwhile, so no register holds two copies), and
// reads the sums back. Every thread of every block of the cluster calls it.
template <int kN, int kThreads, int kAcc>
__device__ __forceinline__ void split_k_reduce(float (&acc)[kAcc], uint8_t* ring, uint32_t rank, int splits) {
  static_assert(kN % 8 == 0 && kN / 2 <= kAcc, "whole float4s of the path's accumulators");
  constexpr int kQuads = kN / 8;
  float4* mine = reinterpret_cast<float4*>(ring) + threadIdx.x;  // [quad][thread]: a warp's float4s side by side
  __syncthreads();  // every warpgroup of the block is done with the ring
#pragma unroll
  for (int j = 0; j < kQuads; ++j)
    mine[j * kThreads] = make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]);
  kernels::cluster_sync();  // every rank's partial sums are in its shared memory
  if (rank == 0) {
    const auto local = static_cast<uint32_t>(__cvta_generic_to_shared(mine));
#pragma unroll 1
    for (int j = 0; j < kQuads; ++j) {
      float4 sum = mine[j * kThreads];
      for (int r = 1; r < splits; ++r) {
        const float4 v = kernels::cluster_load_f32x4(kernels::cluster_map(local + j * kThreads * 16, r));
        sum.x += v.x;
        sum.y += v.y;
        sum.z += v.z;
        sum.w += v.w;
      }
      mine[j * kThreads] = sum;
    }
#pragma unroll
    for (int j = 0; j < kQuads; ++j) {
      const float4 v = mine[j * kThreads];
      acc[4 * j] = v.x, acc[4 * j + 1] = v.y, acc[4 * j + 2] = v.z, acc[4 * j + 3] = v.w;
    }
  }
  kernels::cluster_sync();  // rank 0 has read the others' shared memory: they may exit
}

}  // namespace mxmoe::sm90
