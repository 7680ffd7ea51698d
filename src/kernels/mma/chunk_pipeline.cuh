#pragma once
// The K loop of the tensor-core family: a kStages-deep cp.async ring over chunks of K. Chunk c's
// stage is requested kStages - 1 chunks ahead, so while chunk c is computed, chunks c + 1 ..
// c + kStages - 1 are in flight (the weights stream from HBM; depth is what hides their latency).
// One block barrier per chunk: after it, chunk c has landed for every thread and every warp is done
// with chunk c - 1, whose stage is then refilled (a second barrier after the compute, as there was,
// made every warp wait for the slowest twice per chunk: the profile's largest stall).
// Shared by the tensor-core kernels: load(stage, chunk) issues the cp.async copies of one chunk
// (every thread the same number of commits), compute(stage) consumes one. The caller synchronises
// before it reuses the stages' shared memory.
#include <cstdint>

#include "kernels/common/bulk_copy.cuh"
#include "kernels/common/cp_async.cuh"

namespace mxmoe::mma {

// The ring itself: landed(c) waits for whatever of chunk c does not arrive in the thread's own cp.async
// group (nothing, or a tensor copy's barrier), before the block barrier.
template <int kStages, class Landed, class Load, class Compute>
__device__ __forceinline__ void run_chunk_ring(int chunks, Landed&& landed, Load&& load, Compute&& compute) {
  static_assert(kStages >= 2, "a pipeline needs at least two stages");
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < chunks) load(s, s);
    kernels::cp_async_commit();
  }
  for (int c = 0; c < chunks; ++c) {
    kernels::cp_async_wait<kStages - 2>();  // chunk c's group (the (c + 1)-th committed) has landed
    landed(c);
    __syncthreads();                        // ... for every thread; chunk c - 1 is done everywhere
    const int next = c + kStages - 1;       // its stage is chunk c - 1's
    if (next < chunks) load(next % kStages, next);
    kernels::cp_async_commit();
    compute(c % kStages);
  }
}

template <int kStages, class Load, class Compute>
__device__ __forceinline__ void run_chunk_pipeline(int chunks, Load&& load, Compute&& compute) {
  run_chunk_ring<kStages>(chunks, [](int) {}, load, compute);
}

// The same ring where part of each stage arrives by a tensor copy on one mbarrier per stage (the 16- and
// 32-row swap-AB tiles' weight records, swap_stage_loads.cuh): chunk c's copy completes the
// (c / kStages)-th phase of its stage's barrier, which every thread waits for besides its own cp.async
// group. `bar0`: stage 0's barrier (shared-window address), stage s's 8 s bytes on.
template <int kStages, class Load, class Compute>
__device__ __forceinline__ void run_chunk_pipeline(int chunks, uint32_t bar0, Load&& load, Compute&& compute) {
  run_chunk_ring<kStages>(
      chunks,
      [bar0](int c) {
        kernels::mbarrier_wait_parity(bar0 + 8u * static_cast<uint32_t>(c % kStages),
                                      static_cast<uint32_t>(c / kStages) & 1u);
      },
      load, compute);
}

}  // namespace mxmoe::mma
