#pragma once
// ldmatrix.sync.aligned.m8n8.x4.shared.b16 (SM75+): four 8x8 tiles of 16-bit elements from shared
// memory, lane i giving the address of row i % 8 of tile i / 8; lane (g, t) receives elements
// (g, 2t..2t+1) of each tile, which is the layout of mma.sync's A and B fragments.
#include <cstdint>

#include "kernels/common/bulk_copy.cuh"

namespace mxmoe::kernels {

__device__ __forceinline__ void ldmatrix_x4(const void* row_address, uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                            uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(shared_address(row_address)));
}

}  // namespace mxmoe::kernels
