#pragma once
// The resident kernel's shared-memory layout and per-block counts (resident.cpp computes them; the
// launcher passes them to the kernel, which derives nothing itself). One block's dynamic memory:
//   [0, ring_offset)               the T tokens' hidden rows, staged (GEMM1's B operand)
//   [ring_offset, resident_offset)  16 warps' weight rings; after GEMM1, its partial sums, then GEMM2's
//                                  staged rows of up to two expert slots
//   [resident_offset, total)        the block's GEMM2 units, unit_stride bytes apart
#include <cstdint>

#include "kernels/gemv/gemv.hpp"
#include "kernels/gemv/resident.hpp"

namespace mxmoe::gemv {

inline constexpr int kResidentRingBytes = kResidentWarps * warp_ring_bytes(kDefaultStages);

struct ResidentLayout {
  int rows_cap = 1;          // staged rows per slot (min(T, 8))
  int64_t items1 = 0;        // GEMM1 tiles (of all slots) per block, at most
  int64_t rounds1 = 0;       // GEMM1 units per warp, at most
  int64_t units2 = 0;        // GEMM2 units (a tile's split) per block, at most
  int64_t unit_stride = 0;   // bytes of one resident unit (its split's chunks, the longest split)
  int64_t ring_offset = 0, resident_offset = 0, stage2_bytes = 0, total = 0;
};

ResidentLayout resident_layout(const ResidentShape& s);

}  // namespace mxmoe::gemv
