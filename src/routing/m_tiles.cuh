#pragma once
// The m-tiles of a grouped launch: each active expert's rows cut into ceil(rows / kBlockM) tiles of
// kBlockM rows, the experts in ascending order (the routing's active list), tile x the x-th of them
// all. Shared by the tensor-core GEMMs and the MXFP8 expand, so that both agree on where a tile's rows
// start: with kBlockM = 128, tile x's rows are the padded rows [128 x, 128 x + 128).
#include <cstdint>

namespace mxmoe::routing {

struct MTile {
  int expert;  // -1: x is past the last tile
  int row0;    // the tile's first row in the sorted (expert, token, slot) order
  int rows;    // rows of the tile that hold data (the rest are padding)
  int expert_tiles;  // m-tiles of the tile's expert
};

// The number of m-tiles is at most pairs / kBlockM + (experts with rows): launch that many.
inline int64_t m_tiles_bound(int64_t pairs, int64_t max_active, int block_m) { return pairs / block_m + max_active; }

// Tile `x` (warp 0 of the block; the caller synchronises before the other warps read `tile`).
template <int kBlockM>
__device__ void find_m_tile(int x, const int32_t* active_experts, const int32_t* active_count,
                            const int32_t* expert_offsets, MTile& tile) {
  const int lane = threadIdx.x & 31;
  if (threadIdx.x >= 32) return;
  const int count = *active_count;
  if (lane == 0) tile.expert = -1;
  __syncwarp();
  int base = 0;
  for (int j0 = 0; j0 < count; j0 += 32) {
    const int j = j0 + lane;
    int e = 0, start = 0, rows = 0;
    if (j < count) {
      e = active_experts[j];
      start = expert_offsets[e];
      rows = expert_offsets[e + 1] - start;
    }
    const int tiles = (rows + kBlockM - 1) / kBlockM;
    int incl = tiles;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, incl, off);
      if (lane >= off) incl += v;
    }
    const int first = base + incl - tiles;
    if (j < count && x >= first && x < first + tiles) {
      const int m0 = (x - first) * kBlockM;
      tile.expert = e;
      tile.row0 = start + m0;
      tile.rows = min(kBlockM, rows - m0);
      tile.expert_tiles = tiles;
    }
    base += __shfl_sync(0xffffffffu, incl, 31);
  }
}

}  // namespace mxmoe::routing
