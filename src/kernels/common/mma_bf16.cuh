#pragma once
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (PTX ISA, "Matrix fragments for mma.m16n8k16").
// Fragments, with g = lane / 4 and q = lane % 4:
//   A (16x16, row): a0 = (g,   2q..2q+1)  a1 = (g+8, 2q..2q+1)  a2 = (g, 2q+8..+9)  a3 = (g+8, 2q+8..+9)
//   B (16x8,  col): b0 = (k 2q..2q+1, n g)  b1 = (k 2q+8..2q+9, n g)
//   C (16x8):       c0,c1 = (g, 2q..2q+1)    c2,c3 = (g+8, 2q..2q+1)
#include <cstdint>

namespace mxmoe::kernels {

__device__ __forceinline__ void mma_m16n8k16_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                  uint32_t b0, uint32_t b1) {
  // Not volatile: the MMA has no side effect, so the compiler may interleave it with the decode.
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

}  // namespace mxmoe::kernels
