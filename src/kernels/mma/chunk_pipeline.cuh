#pragma once
// The K loop of the tensor-core family: a kStages-deep cp.async ring over chunks of K. Chunk c's
// stage is requested kStages - 1 chunks ahead, so while chunk c is computed, chunks c + 1 ..
// c + kStages - 1 are in flight (the weights stream from HBM; depth is what hides their latency).
// Shared by the Bf16Atom and MX kernels: load(stage, chunk) issues the cp.async copies of one chunk
// (every thread the same number of commits), compute(stage) consumes one.
#include "kernels/common/cp_async.cuh"

namespace mxmoe::mma {

template <int kStages, class Load, class Compute>
__device__ __forceinline__ void run_chunk_pipeline(int chunks, Load&& load, Compute&& compute) {
  static_assert(kStages >= 2, "a pipeline needs at least two stages");
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < chunks) load(s, s);
    kernels::cp_async_commit();
  }
  for (int c = 0; c < chunks; ++c) {
    // The stage chunk c + kStages - 1 refills was last read by chunk c - 1: freed by the sync below.
    const int next = c + kStages - 1;
    if (next < chunks) load(next % kStages, next);
    kernels::cp_async_commit();
    kernels::cp_async_wait<kStages - 1>();  // chunk c's group (the (c + 1)-th committed) has landed
    __syncthreads();                        // ... for every thread's copies
    compute(c % kStages);
    __syncthreads();                        // nobody still reads the stage the next iteration refills
  }
}

}  // namespace mxmoe::mma
