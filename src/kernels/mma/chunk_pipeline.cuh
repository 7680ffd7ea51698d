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
#include "kernels/common/bulk_copy.cuh"
#include "kernels/common/cp_async.cuh"

namespace mxmoe::mma {

// The same K loop without a block barrier per chunk: a kStages-deep ring whose stage s is full once
// every thread's copies into it have landed (full[s]: one cp.async arrival per thread) and free once
// every warp has computed it (empty[s]: one arrival per warp). A warp computes chunk c when it has
// landed, releases it, then refills the stage of chunk c - 1 with chunk c + kStages - 1 once every
// warp has released c - 1: warps drift up to a chunk apart instead of meeting every chunk, and
// chunks c + 1 .. c + kStages - 2 stay in flight while c + 1 is computed. The barriers live in shared
// memory (full: ring_full_arrivals(kThreads), empty: one per warp), initialised by the caller and made
// visible by a block barrier before the first call. compute(stage) must be called by every thread (a
// warp with nothing to do returns from it at once). Each thread also arrives on full[s] plainly (a
// release of its own accesses) after issuing its copies: compute-sanitizer's racecheck takes a
// zero-filling cp.async (padding rows, K past the end) for a plain store, which the copies' own
// arrival does not release for it, and reported a hazard between those and the stage's readers.
__host__ __device__ constexpr int ring_full_arrivals(int threads) { return 2 * threads; }

template <int kStages, int kThreads, class Load, class Compute>
__device__ __forceinline__ void run_chunk_ring(int chunks, uint32_t full, uint32_t empty, Load&& load,
                                               Compute&& compute) {
  static_assert(kStages >= 3, "the ring keeps a chunk in flight while one is computed and one drains");
  constexpr uint32_t kBar = 8;  // bytes per mbarrier
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s)
    if (s < chunks) {
      load(s, s);
      kernels::cp_async_arrive_noinc(full + s * kBar);
      kernels::mbarrier_arrive(full + s * kBar);
    }
  int stage = 0;
  uint32_t phase = 0;  // bit s: the parity of stage s's next full phase; the empty phases lag one round
  for (int c = 0; c < chunks; ++c) {
    kernels::mbarrier_wait_parity(full + stage * kBar, (phase >> stage) & 1u);
    compute(stage);
    __syncwarp();
    if ((threadIdx.x & 31) == 0) kernels::mbarrier_arrive(empty + stage * kBar);
    phase ^= 1u << stage;
    const int n = c + kStages - 1;
    const int refill = stage == 0 ? kStages - 1 : stage - 1;  // chunk c - 1's stage
    if (n < chunks) {
      // Chunk n - kStages = c - 1 left this stage at the empty phase the full one just passed.
      if (n >= kStages) kernels::mbarrier_wait_parity(empty + refill * kBar, ((phase >> refill) & 1u) ^ 1u);
      load(refill, n);
      kernels::cp_async_arrive_noinc(full + refill * kBar);
      kernels::mbarrier_arrive(full + refill * kBar);
    }
    stage = stage == kStages - 1 ? 0 : stage + 1;
  }
}

template <int kStages, class Load, class Compute>
__device__ __forceinline__ void run_chunk_pipeline(int chunks, Load&& load, Compute&& compute) {
  static_assert(kStages >= 2, "a pipeline needs at least two stages");
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < chunks) load(s, s);
    kernels::cp_async_commit();
  }
  for (int c = 0; c < chunks; ++c) {
    kernels::cp_async_wait<kStages - 2>();  // chunk c's group (the (c + 1)-th committed) has landed
    __syncthreads();                        // ... for every thread; chunk c - 1 is done everywhere
    const int next = c + kStages - 1;       // its stage is chunk c - 1's
    if (next < chunks) load(next % kStages, next);
    kernels::cp_async_commit();
    compute(c % kStages);
  }
}

}  // namespace mxmoe::mma
