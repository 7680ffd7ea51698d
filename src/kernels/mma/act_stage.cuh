#pragma once
// How the register-decode tensor-core tiles (mma_gemm_kernel.cu, swap_gemm_kernel.cu) stage a chunk
// of activations and read it back in the Bf16Atom's K order.
//
// A staged row is one chunk of K (128 bf16) of one token, its 16-byte groups (MX block b, word w)
// placed by granule_slot(), plus 64 bytes so rows r and r+1 fall 4 bank quads apart: lanes (g, t)
// reading group (t, w) of rows g (8 rows, 4 blocks) then hit 8 distinct bank quads per phase.
// A lane's decoded weight pairs are elements (3,7), (2,6), (1,5), (0,4) of its block's word w
// (Bf16Atom::decode); to_pairs() puts the activations' 8 elements of that word in the same order.
#include <cstdint>

#include "layout/gemv_layout.hpp"

namespace mxmoe::mma {

inline constexpr int kRowBytes = gemv::kChunkK * 2 + 64;

__host__ __device__ constexpr int staged_rows_bytes(int rows) { return rows * kRowBytes; }

__device__ __forceinline__ int granule_slot(int b, int w) { return (w >> 1) * 8 + (w & 1) * 4 + b; }

// 8 bf16 (elements 0..7 of a word) -> the decode's pair order (3,7), (2,6), (1,5), (0,4).
__device__ __forceinline__ void to_pairs(const uint4& x, uint32_t (&p)[4]) {
  p[0] = __byte_perm(x.y, x.w, 0x7632);
  p[1] = __byte_perm(x.y, x.w, 0x5410);
  p[2] = __byte_perm(x.x, x.z, 0x7632);
  p[3] = __byte_perm(x.x, x.z, 0x5410);
}

}  // namespace mxmoe::mma
