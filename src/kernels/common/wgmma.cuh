#pragma once
// Hopper's warpgroup MMA (sm_90a only; PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-
// Accumulate Instructions"), the forms the sm90 family uses: bf16 x bf16 -> fp32, m64nNk16 with A from
// registers and B from shared memory through a matrix descriptor.
//
// A (64 x 16): warp i of the warpgroup holds rows 16i..16i+15 in mma.m16n8k16's A layout
// (mma_bf16.cuh): a0 = (g, 2q..), a1 = (g+8, 2q..), a2 = (g, 2q+8..), a3 = (g+8, 2q+8..).
// D (64 x N): warp i's rows 16i + g and 16i + g + 8; d[4j + e] = (g, 8j + 2q + e), d[4j + 2 + e] =
// (g + 8, 8j + 2q + e) for e = 0, 1: per n8 group the m16n8 accumulator layout.
// B (N x 16, K contiguous: "K-major", imm-trans-b 0) in the 128-byte swizzle: row r's 16-byte granule
// j of a 128-byte line sits at r * 128 + ((j ^ (r % 8)) * 16) from a 1024-byte-aligned base; one
// instruction reads 32 bytes of each row, at base + 32 * s for K step s (0..3) of the line.
//
// The wgmma is asynchronous: its A registers and accumulators may not be touched by other
// instructions until wgmma_wait retires its group (wgmma_fence_operands ties the compiler's view of
// the accumulators to that point).
#include <cstdint>

#include "kernels/common/arch_features.cuh"

namespace mxmoe::kernels {

// The shared-memory matrix descriptor of a 128-byte-swizzled, K-major operand (PTX ISA, "Matrix
// Descriptor Format"): start address >> 4 (bits 0-13); leading byte offset (16-29), unused by
// swizzled K-major layouts whose K step stays inside one 128-byte line; stride byte offset (32-45)
// between 8-row groups, 1024 here; base offset 0 (bits 49-51: 1024-byte-aligned lines); swizzle
// mode 1 = 128 bytes (bits 62-63).
// It is built as its low word (start address and leading byte offset), to which the K steps' offsets
// are added in 32 bits (the address field has no carry out below 256 KB), and a constant high word.
// A warp's lanes all pass the same address, and the low word comes back through a shuffle from lane
// 0: ptxas then knows it is warp-uniform and builds every descriptor in uniform registers, instead of
// in each lane followed by moves to uniform registers (R2UR) before each wgmma. That was about a
// fifth of the 64-row wgmma tile's instructions per chunk (docs/perf-log.md). The whole warp must
// call it.
__device__ __forceinline__ uint32_t wgmma_desc_sw128_low_uniform(uint32_t smem_address) {
  return __shfl_sync(0xFFFFFFFFu, ((smem_address & 0x3FFFFu) >> 4) | (1u << 16), 0);
}
__device__ __forceinline__ uint64_t wgmma_desc_sw128_from_low(uint32_t low) {
  return static_cast<uint64_t>(low) | (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62);
}

// Orders this thread's register writes (the A fragments, the accumulators) before the warpgroup's
// next wgmma reads them.
__device__ __forceinline__ void wgmma_fence() {
#if MXMOE_HAS_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}

// Closes the group of the wgmmas issued since the last commit.
__device__ __forceinline__ void wgmma_commit() {
#if MXMOE_HAS_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}

// Waits until at most kPending committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
#if MXMOE_HAS_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
#endif
}

// Makes the compiler treat the accumulators as written here (after a wgmma_wait, before a wgmma), so
// it moves no read or write of them across the asynchronous MMAs.
template <int kRegs>
__device__ __forceinline__ void wgmma_fence_operands(float (&d)[kRegs]) {
#pragma unroll
  for (int i = 0; i < kRegs; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// D (64 x N, fp32) += A (64 x 16 bf16, registers) x B (N rows x 16 of K, bf16, shared memory through
// `desc`), by the whole warpgroup.
__device__ __forceinline__ void wgmma_m64n24k16_bf16_rs(float (&d)[12], uint32_t a0, uint32_t a1, uint32_t a2,
                                                        uint32_t a3, uint64_t desc) {
#if MXMOE_HAS_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %17, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n24k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11}, "
      "{%12,%13,%14,%15}, %16, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(1));
#else
  (void)d, (void)a0, (void)a1, (void)a2, (void)a3, (void)desc;
  __trap();
#endif
}

__device__ __forceinline__ void wgmma_m64n32k16_bf16_rs(float (&d)[16], uint32_t a0, uint32_t a1, uint32_t a2,
                                                        uint32_t a3, uint64_t desc) {
#if MXMOE_HAS_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, "
      "{%16,%17,%18,%19}, %20, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(1));
#else
  (void)d, (void)a0, (void)a1, (void)a2, (void)a3, (void)desc;
  __trap();
#endif
}

__device__ __forceinline__ void wgmma_m64n40k16_bf16_rs(float (&d)[20], uint32_t a0, uint32_t a1, uint32_t a2,
                                                        uint32_t a3, uint64_t desc) {
#if MXMOE_HAS_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %25, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n40k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19}, "
      "{%20,%21,%22,%23}, %24, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(1));
#else
  (void)d, (void)a0, (void)a1, (void)a2, (void)a3, (void)desc;
  __trap();
#endif
}

__device__ __forceinline__ void wgmma_m64n48k16_bf16_rs(float (&d)[24], uint32_t a0, uint32_t a1, uint32_t a2,
                                                        uint32_t a3, uint64_t desc) {
#if MXMOE_HAS_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %29, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n48k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23}, "
      "{%24,%25,%26,%27}, %28, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(1));
#else
  (void)d, (void)a0, (void)a1, (void)a2, (void)a3, (void)desc;
  __trap();
#endif
}

__device__ __forceinline__ void wgmma_m64n56k16_bf16_rs(float (&d)[28], uint32_t a0, uint32_t a1, uint32_t a2,
                                                        uint32_t a3, uint64_t desc) {
#if MXMOE_HAS_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %33, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n56k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27}, "
      "{%28,%29,%30,%31}, %32, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(1));
#else
  (void)d, (void)a0, (void)a1, (void)a2, (void)a3, (void)desc;
  __trap();
#endif
}

__device__ __forceinline__ void wgmma_m64n64k16_bf16_rs(float (&d)[32], uint32_t a0, uint32_t a1, uint32_t a2,
                                                        uint32_t a3, uint64_t desc) {
#if MXMOE_HAS_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
      "{%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(1));
#else
  (void)d, (void)a0, (void)a1, (void)a2, (void)a3, (void)desc;
  __trap();
#endif
}

__device__ __forceinline__ void wgmma_m64n128k16_bf16_rs(float (&d)[64], uint32_t a0, uint32_t a1, uint32_t a2,
                                                        uint32_t a3, uint64_t desc) {
#if MXMOE_HAS_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
      "{%64,%65,%66,%67}, %68, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(1));
#else
  (void)d, (void)a0, (void)a1, (void)a2, (void)a3, (void)desc;
  __trap();
#endif
}

}  // namespace mxmoe::kernels
