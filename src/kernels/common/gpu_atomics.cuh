#pragma once
// A device-scope counter step with acquire-release semantics (PTX ISA, "Memory Consistency Model"):
// the arrival of a block whose threads met at a block barrier after their stores, read by the last
// arrival before its threads read those stores. One atomic instead of fence.sc + atomic + fence.sc.
#include <cstdint>

namespace mxmoe::kernels {

__device__ __forceinline__ int32_t fetch_add_acq_rel_gpu(int32_t* counter, int32_t value) {
  int32_t old;
  asm volatile("atom.add.acq_rel.gpu.global.s32 %0, [%1], %2;\n" : "=r"(old) : "l"(counter), "r"(value) : "memory");
  return old;
}

// A block's arrival on a device-scope count: after a block barrier that follows the block's stores,
// one thread's release add publishes them all to whoever acquires the count (acquire_count).
__device__ __forceinline__ void release_add_gpu(int32_t* counter, int32_t value) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(counter), "r"(value) : "memory");
}

// A count readable across the grid: an acquire load (the writer released, or fenced then added).
__device__ __forceinline__ int acquire_count(const int32_t* count) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(count) : "memory");
  return v;
}

// Thread 0 waits, with a growing sleep, until `count` reaches `target`; then the block meets. The
// block's threads may then read what the arrivals released. Every thread of the block calls it.
__device__ __forceinline__ void block_wait_count(const int32_t* count, int target) {
  if (threadIdx.x == 0) {
    unsigned sleep = 32;
    while (acquire_count(count) < target) {
      __nanosleep(sleep);
      sleep = min(2 * sleep, 512u);
    }
  }
  __syncthreads();
}

}  // namespace mxmoe::kernels
