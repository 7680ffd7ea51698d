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
// fifth of the 64-row wgmma tile's instructions per chunk (docs/perf/wgmma.md). The whole warp must
// call it. Where ptxas already holds the address in a uniform register (the FP8 tiles' stages), the
// plain low word is built there without the shuffle.
__device__ __forceinline__ uint32_t wgmma_desc_sw128_low(uint32_t smem_address) {
  return ((smem_address & 0x3FFFFu) >> 4) | (1u << 16);
}
__device__ __forceinline__ uint32_t wgmma_desc_sw128_low_uniform(uint32_t smem_address) {
  return __shfl_sync(0xFFFFFFFFu, wgmma_desc_sw128_low(smem_address), 0);
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

// The register-A wgmma of every width N (a multiple of 8 up to 64, 96, 128, or a multiple of 8 from 136 to
// 192: the FP8 192-row tile's), one asm template for all: its operands are listed as (a0, a1, a2, a3,
// desc, scale_d, d[0], d[1], ...), so d[i] is always %(6 + i) and only the accumulator list grows with N. (A and the descriptor are read-write operands
// only to come first: the instruction writes nothing but d.) The placeholders and operands of the first
// R accumulators, 4 at a time:
#define MXMOE_WGMMA_D4 "%6,%7,%8,%9"
#define MXMOE_WGMMA_D8 MXMOE_WGMMA_D4 ",%10,%11,%12,%13"
#define MXMOE_WGMMA_D12 MXMOE_WGMMA_D8 ",%14,%15,%16,%17"
#define MXMOE_WGMMA_D16 MXMOE_WGMMA_D12 ",%18,%19,%20,%21"
#define MXMOE_WGMMA_D20 MXMOE_WGMMA_D16 ",%22,%23,%24,%25"
#define MXMOE_WGMMA_D24 MXMOE_WGMMA_D20 ",%26,%27,%28,%29"
#define MXMOE_WGMMA_D28 MXMOE_WGMMA_D24 ",%30,%31,%32,%33"
#define MXMOE_WGMMA_D32 MXMOE_WGMMA_D28 ",%34,%35,%36,%37"
#define MXMOE_WGMMA_D36 MXMOE_WGMMA_D32 ",%38,%39,%40,%41"
#define MXMOE_WGMMA_D40 MXMOE_WGMMA_D36 ",%42,%43,%44,%45"
#define MXMOE_WGMMA_D44 MXMOE_WGMMA_D40 ",%46,%47,%48,%49"
#define MXMOE_WGMMA_D48 MXMOE_WGMMA_D44 ",%50,%51,%52,%53"
#define MXMOE_WGMMA_D52 MXMOE_WGMMA_D48 ",%54,%55,%56,%57"
#define MXMOE_WGMMA_D56 MXMOE_WGMMA_D52 ",%58,%59,%60,%61"
#define MXMOE_WGMMA_D60 MXMOE_WGMMA_D56 ",%62,%63,%64,%65"
#define MXMOE_WGMMA_D64 MXMOE_WGMMA_D60 ",%66,%67,%68,%69"
#define MXMOE_WGMMA_D68 MXMOE_WGMMA_D64 ",%70,%71,%72,%73"
#define MXMOE_WGMMA_D72 MXMOE_WGMMA_D68 ",%74,%75,%76,%77"
#define MXMOE_WGMMA_D76 MXMOE_WGMMA_D72 ",%78,%79,%80,%81"
#define MXMOE_WGMMA_D80 MXMOE_WGMMA_D76 ",%82,%83,%84,%85"
#define MXMOE_WGMMA_D84 MXMOE_WGMMA_D80 ",%86,%87,%88,%89"
#define MXMOE_WGMMA_D88 MXMOE_WGMMA_D84 ",%90,%91,%92,%93"
#define MXMOE_WGMMA_D92 MXMOE_WGMMA_D88 ",%94,%95,%96,%97"
#define MXMOE_WGMMA_D96 MXMOE_WGMMA_D92 ",%98,%99,%100,%101"
#define MXMOE_WGMMA_F(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define MXMOE_WGMMA_F4 MXMOE_WGMMA_F(0)
#define MXMOE_WGMMA_F8 MXMOE_WGMMA_F4, MXMOE_WGMMA_F(4)
#define MXMOE_WGMMA_F12 MXMOE_WGMMA_F8, MXMOE_WGMMA_F(8)
#define MXMOE_WGMMA_F16 MXMOE_WGMMA_F12, MXMOE_WGMMA_F(12)
#define MXMOE_WGMMA_F20 MXMOE_WGMMA_F16, MXMOE_WGMMA_F(16)
#define MXMOE_WGMMA_F24 MXMOE_WGMMA_F20, MXMOE_WGMMA_F(20)
#define MXMOE_WGMMA_F28 MXMOE_WGMMA_F24, MXMOE_WGMMA_F(24)
#define MXMOE_WGMMA_F32 MXMOE_WGMMA_F28, MXMOE_WGMMA_F(28)
#define MXMOE_WGMMA_F36 MXMOE_WGMMA_F32, MXMOE_WGMMA_F(32)
#define MXMOE_WGMMA_F40 MXMOE_WGMMA_F36, MXMOE_WGMMA_F(36)
#define MXMOE_WGMMA_F44 MXMOE_WGMMA_F40, MXMOE_WGMMA_F(40)
#define MXMOE_WGMMA_F48 MXMOE_WGMMA_F44, MXMOE_WGMMA_F(44)
#define MXMOE_WGMMA_F52 MXMOE_WGMMA_F48, MXMOE_WGMMA_F(48)
#define MXMOE_WGMMA_F56 MXMOE_WGMMA_F52, MXMOE_WGMMA_F(52)
#define MXMOE_WGMMA_F60 MXMOE_WGMMA_F56, MXMOE_WGMMA_F(56)
#define MXMOE_WGMMA_F64 MXMOE_WGMMA_F60, MXMOE_WGMMA_F(60)
#define MXMOE_WGMMA_F68 MXMOE_WGMMA_F64, MXMOE_WGMMA_F(64)
#define MXMOE_WGMMA_F72 MXMOE_WGMMA_F68, MXMOE_WGMMA_F(68)
#define MXMOE_WGMMA_F76 MXMOE_WGMMA_F72, MXMOE_WGMMA_F(72)
#define MXMOE_WGMMA_F80 MXMOE_WGMMA_F76, MXMOE_WGMMA_F(76)
#define MXMOE_WGMMA_F84 MXMOE_WGMMA_F80, MXMOE_WGMMA_F(80)
#define MXMOE_WGMMA_F88 MXMOE_WGMMA_F84, MXMOE_WGMMA_F(84)
#define MXMOE_WGMMA_F92 MXMOE_WGMMA_F88, MXMOE_WGMMA_F(88)
#define MXMOE_WGMMA_F96 MXMOE_WGMMA_F92, MXMOE_WGMMA_F(92)
// One wgmma.mma_async of `shape_types` (e.g. "m64n32k16.f32.bf16.bf16") with R accumulators; `tail`:
// the operands after imm-scale-b (the bf16 forms' imm-trans-b).
#define MXMOE_WGMMA_RS(shape_types, R, tail)                                                         \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %5, 0;\nwgmma.mma_async.sync.aligned." shape_types \
               " {" MXMOE_WGMMA_D##R "}, {%0,%1,%2,%3}, %4, p, 1, 1" tail ";\n}\n"                   \
               : "+r"(a0), "+r"(a1), "+r"(a2), "+r"(a3), "+l"(desc), "+r"(scale_d), MXMOE_WGMMA_F##R)
// The body of a wgmma_rs_* template: the wgmma of width kN (8 to 64 in steps of 8, 96, 128, 136 to 192 in
// steps of 8) whose shape ends in `k_types` (e.g. "k16.f32.bf16.bf16"), accumulating into d.
#define MXMOE_WGMMA_RS_WIDTHS(k_types, tail)                                                       \
  static_assert(kN % 8 == 0 && (kN <= 64 || kN == 96 || kN >= 128) && kN <= 192, "a wgmma width");    \
  uint32_t scale_d = 1;                                                                            \
  if constexpr (kN == 8) MXMOE_WGMMA_RS("m64n8" k_types, 4, tail);                                 \
  else if constexpr (kN == 16) MXMOE_WGMMA_RS("m64n16" k_types, 8, tail);                          \
  else if constexpr (kN == 24) MXMOE_WGMMA_RS("m64n24" k_types, 12, tail);                         \
  else if constexpr (kN == 32) MXMOE_WGMMA_RS("m64n32" k_types, 16, tail);                         \
  else if constexpr (kN == 40) MXMOE_WGMMA_RS("m64n40" k_types, 20, tail);                         \
  else if constexpr (kN == 48) MXMOE_WGMMA_RS("m64n48" k_types, 24, tail);                         \
  else if constexpr (kN == 56) MXMOE_WGMMA_RS("m64n56" k_types, 28, tail);                         \
  else if constexpr (kN == 64) MXMOE_WGMMA_RS("m64n64" k_types, 32, tail);                         \
  else if constexpr (kN == 96) MXMOE_WGMMA_RS("m64n96" k_types, 48, tail);                         \
  else if constexpr (kN == 128) MXMOE_WGMMA_RS("m64n128" k_types, 64, tail);                       \
  else if constexpr (kN == 136) MXMOE_WGMMA_RS("m64n136" k_types, 68, tail);                       \
  else if constexpr (kN == 144) MXMOE_WGMMA_RS("m64n144" k_types, 72, tail);                       \
  else if constexpr (kN == 152) MXMOE_WGMMA_RS("m64n152" k_types, 76, tail);                       \
  else if constexpr (kN == 160) MXMOE_WGMMA_RS("m64n160" k_types, 80, tail);                       \
  else if constexpr (kN == 168) MXMOE_WGMMA_RS("m64n168" k_types, 84, tail);                       \
  else if constexpr (kN == 176) MXMOE_WGMMA_RS("m64n176" k_types, 88, tail);                       \
  else if constexpr (kN == 184) MXMOE_WGMMA_RS("m64n184" k_types, 92, tail);                       \
  else MXMOE_WGMMA_RS("m64n192" k_types, 96, tail)

// D (64 x N, fp32) += A (64 x 16 bf16, registers) x B (N rows x 16 of K, bf16, shared memory through
// `desc`), by the whole warpgroup. N: 8 to 64 in steps of 8, 96 or 128.
template <int kN>
__device__ __forceinline__ void wgmma_rs_bf16(float (&d)[kN / 2], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                              uint64_t desc) {
#if MXMOE_HAS_WGMMA
  MXMOE_WGMMA_RS_WIDTHS("k16.f32.bf16.bf16", ", 0");
#else
  (void)d, (void)a0, (void)a1, (void)a2, (void)a3, (void)desc;
  __trap();
#endif
}

}  // namespace mxmoe::kernels
