#pragma once
// The m-tiles of a grouped launch: each active expert's rows cut into ceil(rows / kBlockM) tiles of
// kBlockM rows, the experts in ascending order (as in the routing's active list), tile x the x-th of them
// all. Shared by the tensor-core GEMMs and the MXFP8 expand, so that both agree on where a tile's rows
// start: with kBlockM = 128, tile x's rows are the padded rows [128 x, 128 x + 128).
#include <cstdint>

#include "common/m_tiles_bound.hpp"

namespace mxmoe::routing {

struct MTile {
  int expert;  // -1: x is past the last tile
  int row0;    // the tile's first row in the sorted (expert, token, slot) order
  int rows;    // rows of the tile that hold data (the rest are padding)
  int expert_tiles;  // m-tiles of the tile's expert
};

// Tile `x` (warp 0 of the block; the caller synchronises before the other warps read `tile`), from the
// `experts` + 1 offsets alone: an expert without rows has no tiles, so scanning every expert numbers
// the tiles as the active list would. Each lane loads its kPerLane experts' offsets at once: a pass over
// 128 experts is one memory round trip, which every block of a tensor-core GEMM pays before its first
// copy (a scan of the active list took two per 32 experts after the count's: 1-3% of gpt-oss-120b's
// layer at T = 768 to 2048 on an H100, docs/perf-log.md).
template <int kBlockM>
__device__ void find_m_tile(int x, int experts, const int32_t* expert_offsets, MTile& tile) {
  constexpr int kPerLane = 4;
  const int lane = threadIdx.x & 31;
  if (threadIdx.x >= 32) return;
  if (lane == 0) tile.expert = -1;
  __syncwarp();
  int base = 0;  // tiles of the passes before
  for (int e0 = 0; e0 < experts && x >= base; e0 += 32 * kPerLane) {
    const int first_e = e0 + lane * kPerLane;
    int offset[kPerLane + 1];
#pragma unroll
    for (int j = 0; j <= kPerLane; ++j) offset[j] = expert_offsets[min(first_e + j, experts)];
    int tiles[kPerLane], sum = 0;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      tiles[j] = (offset[j + 1] - offset[j] + kBlockM - 1) / kBlockM;
      sum += tiles[j];
    }
    int incl = sum;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, incl, off);
      if (lane >= off) incl += v;
    }
    int first = base + incl - sum;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      if (x >= first && x < first + tiles[j]) {
        const int m0 = (x - first) * kBlockM;
        tile.expert = first_e + j;
        tile.row0 = offset[j] + m0;
        tile.rows = min(kBlockM, offset[j + 1] - offset[j] - m0);
        tile.expert_tiles = tiles[j];
      }
      first += tiles[j];
    }
    base += __shfl_sync(0xffffffffu, incl, 31);
  }
}

}  // namespace mxmoe::routing
