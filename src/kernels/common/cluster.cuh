#pragma once
// Thread-block cluster primitives (sm_90+): the cluster barrier's two halves, the block's rank, and
// shared memory of another block of the cluster (distributed shared memory). Used by the GEMV family's
// combine in a cluster (gemv/cluster_combine.cuh) and the FP8 wgmma tiles' split-K (sm90/split_k.cuh).
// Older code has no clusters and its plans none (DeviceCaps::clusters): each is a trap there.
#include <cstdint>

#include "kernels/common/arch_features.cuh"

#if MXMOE_HAS_SM90_ASYNC || !defined(__CUDA_ARCH__)
#define MXMOE_CLUSTER_ASM asm volatile
#else
#define MXMOE_CLUSTER_ASM(...) __trap()
#endif

namespace mxmoe::kernels {

// The cluster barrier: every thread of every block arrives, then waits. A block that exits counts as
// arrived (PTX `exit`). `release` on arrive and `acquire` on wait order the shared-memory accesses of
// the cluster's blocks around it; `relaxed` orders nothing (a block has started: its shared memory may
// be written once the wait returns).
__device__ __forceinline__ void cluster_arrive_relaxed() { MXMOE_CLUSTER_ASM("barrier.cluster.arrive.relaxed;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_arrive_release() { MXMOE_CLUSTER_ASM("barrier.cluster.arrive.release;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_wait_acquire() { MXMOE_CLUSTER_ASM("barrier.cluster.wait.acquire;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_sync() {
  cluster_arrive_release();
  cluster_wait_acquire();
}
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r = 0;
  MXMOE_CLUSTER_ASM("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}

// The address in block `rank`'s shared memory of this block's shared address `local`.
__device__ __forceinline__ uint32_t cluster_map(uint32_t local, uint32_t rank) {
  uint32_t remote = 0;
  MXMOE_CLUSTER_ASM("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}
__device__ __forceinline__ void cluster_store_f32(uint32_t remote, float v) {
  MXMOE_CLUSTER_ASM("st.shared::cluster.f32 [%0], %1;\n" ::"r"(remote), "f"(v) : "memory");
}
__device__ __forceinline__ float4 cluster_load_f32x4(uint32_t remote) {
  float4 v{};
  MXMOE_CLUSTER_ASM("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(remote)
               : "memory");
  return v;
}

}  // namespace mxmoe::kernels

#undef MXMOE_CLUSTER_ASM
