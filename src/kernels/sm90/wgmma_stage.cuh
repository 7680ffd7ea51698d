#pragma once
// One pipeline stage of the wgmma tiles (wgmma_gemm_kernel.cu), filled by one thread with three tensor
// copies (tma.cuh) that complete on the stage's `full` mbarrier, so the block's warps spend no issue
// slots on loads (the per-thread cp.async of the activations and the per-warp bulk copies of the
// weights cost about a third of the main loop's instructions; docs/perf-log.md):
// - weights: the 16 records of the block's tiles for chunk c, one box of the packed weights viewed as
//   [experts x tiles][chunks][record as 136 x 8 bytes] (gemv_layout.hpp: experts back to back, tile by
//   tile, chunk by chunk). Records past the expert's last tile are the next expert's or zeros: a warp's
//   A rows only reach its own accumulator rows, which are never stored;
// - activations: the m-tile's kRows rows from its first, in two halves of K (64 each), 128-byte
//   swizzled as the wgmma reads them (the tensor map's swizzle is the wgmma's when the destination is
//   1024-byte aligned). Rows past the m-tile's are the next expert's or zeros: a B row only reaches its
//   own accumulator column, which is never stored.
#include <cuda.h>

#include <cstdint>

#include "kernels/common/record_map.hpp"
#include "kernels/common/tma.cuh"
#include "kernels/sm90/narrow_paths.cuh"
#include "layout/gemv_layout.hpp"

namespace mxmoe::sm90 {

// The descriptors of a launch (kernel parameter, __grid_constant__).
struct WgmmaMaps {
  CUtensorMap weights;  // 3D: 136 x 8 bytes, chunks, experts x tiles; box {136, 1, 16}
  CUtensorMap act;      // 2D bf16: K padded to whole chunks, rows; box {64, rows}, 128-byte swizzle
  // The same with box {64, N} for each narrower path's N (WgShape::narrow_n); zero past the tile's.
  CUtensorMap act_narrow[kMaxNarrowPaths];
  // The half chunk (MmaArgs::half_tail): the weights' map with box {kHalfRunWords, 1, 16}, the records'
  // run of their first two blocks (gemv_layout.hpp); zero otherwise.
  CUtensorMap weights_half;
};

using kernels::kRecordWords;  // a record in 8-byte elements (record_map.hpp)
// A half chunk's record: the run of bytes [kHalfRunStart, + kHalfRunBytes) holds its two blocks' scales
// and data, and its stage holds the tiles' runs back to back.
inline constexpr int kHalfRunStart = gemv::record_scale_offset(0, 1, 0);
inline constexpr int kHalfRunBytes = gemv::record_data_offset(0, 2, 0) - kHalfRunStart;
inline constexpr int kHalfRunWords = kHalfRunBytes / 8;
static_assert(kHalfRunStart % 8 == 0 && kHalfRunBytes % 16 == 0, "the run is whole 16-byte units of 8-byte words");

// Chunk c of the block's tiles (the first of them tile `expert_tile0` of the [experts x tiles] view)
// and of its m-tile (first row `row0`) into the stage at `stage` (activation halves of kHalfBytes, then
// the records). `act`: the map of the rows the m-tile's wgmma reads (the tile's or a narrower path's),
// `act_box_bytes` the bytes of its box; they land where the full box puts them (the swizzle repeats
// every 8 rows).
template <int kHalfBytes, int kTiles>
__device__ __forceinline__ void load_stage(uint8_t* stage, const WgmmaMaps& maps, const CUtensorMap* act,
                                           uint32_t act_box_bytes, int c, int expert_tile0, int row0,
                                           uint64_t* full) {
  constexpr uint32_t kWeightBytes = kTiles * gemv::kChunkBytes;
  kernels::mbarrier_arrive_expect_tx(full, 2 * act_box_bytes + kWeightBytes);
  kernels::tma_load_3d(stage + 2 * kHalfBytes, &maps.weights, 0, c, expert_tile0, full);
  kernels::tma_load_2d(stage, act, c * gemv::kChunkK, row0, full);
  kernels::tma_load_2d(stage + kHalfBytes, act, c * gemv::kChunkK + gemv::kChunkK / 2, row0, full);
}

// The half chunk c (the last, MmaArgs::half_tail): the tiles' runs and the first activation half.
template <int kHalfBytes, int kTiles>
__device__ __forceinline__ void load_half_stage(uint8_t* stage, const WgmmaMaps& maps, const CUtensorMap* act,
                                                uint32_t act_box_bytes, int c, int expert_tile0, int row0,
                                                uint64_t* full) {
  kernels::mbarrier_arrive_expect_tx(full, act_box_bytes + kTiles * kHalfRunBytes);
  kernels::tma_load_3d(stage + 2 * kHalfBytes, &maps.weights_half, kHalfRunStart / 8, c, expert_tile0, full);
  kernels::tma_load_2d(stage, act, c * gemv::kChunkK, row0, full);
}

}  // namespace mxmoe::sm90
