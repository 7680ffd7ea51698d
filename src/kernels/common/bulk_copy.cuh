#pragma once
// cp.async.bulk (global -> shared, completion on an mbarrier) and the mbarrier operations it needs
// (PTX ISA: "Data Movement: cp.async.bulk", "Parallel Synchronization: mbarrier"). The copies and
// expect_tx are sm_90 and later (a trap in older code, which never calls them: cp_async.cuh's
// warp_copy_to_shared is its ring's copy); init, arrive and the parity wait exist from sm_80.
#include <cstdint>

#include "kernels/common/arch_features.cuh"

namespace mxmoe::kernels {

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// The same, returned through a shuffle from lane 0 (the whole warp calls it): ptxas then knows the
// address is warp-uniform and keeps it in a uniform register, instead of rebuilding it (the CTA's window
// bits included) in regular registers at each use in a loop.
__device__ __forceinline__ uint32_t uniform_shared_address(const void* p) {
  return __shfl_sync(0xFFFFFFFFu, shared_address(p), 0);
}

__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(bar)), "r"(count) : "memory");
}

// Makes barrier initialisation visible to the async proxy before the first bulk copy uses it.
// Below sm_90 there is no async proxy and no cluster: the block barrier after the init suffices.
__device__ __forceinline__ void fence_barrier_init() {
#if MXMOE_HAS_SM90_ASYNC
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

// Each operation below also takes the barrier (and the copy its destination) as a shared-window
// address: a loop that keeps them in 32-bit registers does not recompute them from generic pointers.

// One arrival that also announces `bytes` of transactions the barrier must see complete.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
#if MXMOE_HAS_SM90_ASYNC
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
#else
  (void)bar, (void)bytes;
  __trap();
#endif
}
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  mbarrier_arrive_expect_tx(shared_address(bar), bytes);
}

// One plain arrival (a consumer releasing a stage).
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
#if MXMOE_HAS_SM90_ASYNC
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#else
  asm volatile(  // sm_80 has no sink operand
      "{\n"
      ".reg .b64 state;\n"
      "mbarrier.arrive.shared::cta.b64 state, [%0];\n"
      "}\n" ::"r"(bar)
      : "memory");
#endif
}
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) { mbarrier_arrive(shared_address(bar)); }

// try_wait (sm_90) suspends the thread for a while before it returns false; test_wait (sm_80) polls.
__device__ __forceinline__ void mbarrier_wait_parity(uint32_t bar, uint32_t parity) {
#if MXMOE_HAS_SM90_ASYNC
#define MXMOE_MBARRIER_TEST "try_wait"
#else
#define MXMOE_MBARRIER_TEST "test_wait"
#endif
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "MXMOE_WAIT_%=:\n"
      "mbarrier." MXMOE_MBARRIER_TEST ".parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra MXMOE_WAIT_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
#undef MXMOE_MBARRIER_TEST
}
__device__ __forceinline__ void mbarrier_wait_parity(uint64_t* bar, uint32_t parity) {
  mbarrier_wait_parity(shared_address(bar), parity);
}

// bytes: a multiple of 16; both addresses 16-byte aligned.
__device__ __forceinline__ void bulk_copy_to_shared(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
#if MXMOE_HAS_SM90_ASYNC
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
#else
  (void)dst, (void)src, (void)bytes, (void)bar;
  __trap();
#endif
}
__device__ __forceinline__ void bulk_copy_to_shared(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  bulk_copy_to_shared(shared_address(dst), src, bytes, shared_address(bar));
}

}  // namespace mxmoe::kernels
