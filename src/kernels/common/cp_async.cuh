#pragma once
// cp.async (SM80+): 16-byte global -> shared copies that bypass registers, grouped by commit.
#include <cstdint>

#include "kernels/common/bulk_copy.cuh"

namespace mxmoe::kernels {

// Copies 16 bytes to a shared-window address, or writes 16 zero bytes when !valid (src-size 0:
// nothing is read). Loops that keep their destinations in 32-bit registers call it directly.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  cp_async_16(shared_address(dst), src, valid);
}

// A ring stage's copy by a whole warp, for code without bulk copies (below sm_90; bulk_copy_to_shared
// is one lane's): 16 bytes a lane at a time, then each lane's copies arrive once on `bar` as they land
// (`noinc`: the arrival is not announced first), so the barrier expects kWarpCopyArrivals per phase.
// bytes: a multiple of 16; both addresses 16-byte aligned.
inline constexpr uint32_t kWarpCopyArrivals = 32;
__device__ __forceinline__ void warp_copy_to_shared(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  const char* from = static_cast<const char*>(src);
  for (uint32_t at = (threadIdx.x & 31) * 16; at < bytes; at += 32 * 16) cp_async_16(dst + at, from + at, true);
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most `kPending` of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

}  // namespace mxmoe::kernels
