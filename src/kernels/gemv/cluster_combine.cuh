#pragma once
// GEMM2's combine inside a thread-block cluster (GEMV family, routed locally, T * k <= kClusterSlots).
// The grid's expert slots of one column group are one cluster (dims 1 x slots x 1). Each block stores
// its rows' fp32 values (bias added, times the routing weight) straight into rank 0's shared memory;
// rank 0 waits on the cluster barrier and sums each token's k rows in slot order, bf16 out: the same
// values and the same order as combine_columns, so the same bits, without the rows' round trip through
// L2 and the last-block count (docs/gpu-pipeline.md).
#include <cuda_bf16.h>

#include <cstdint>

#include "common/bf16_pack.cuh"
#include "kernels/common/bulk_copy.cuh"
#include "kernels/common/cluster.cuh"
#include "kernels/gemv/gemv.hpp"
#include "kernels/gemv/gemv_block.cuh"
#include "layout/gemv_layout.hpp"

namespace mxmoe::gemv {

// A block's columns at most: 8 tiles (one warp each, no split-K).
inline constexpr int kClusterCols = 8 * kTileRows;

struct ClusterRows {
  float v[kClusterSlots][kClusterCols];  // [sorted row][block-local column]: T * k <= kClusterSlots rows
};

// Rank 0's buffer (every block of the kernel has one; only rank 0's is written).
__device__ __forceinline__ ClusterRows& cluster_rows() {
  __shared__ __align__(16) ClusterRows rows;
  return rows;
}

// The cluster barrier (kernels/common/cluster.cuh) in two phases. Phase 1 (arrive relaxed at the start,
// wait before the first remote store): every block of the cluster has started, so its shared memory may
// be written. Phase 2 (arrive with release after the stores, rank 0 waits with acquire): the rows are in
// rank 0's shared memory. The inactive slots' blocks may leave at once (an exited block has arrived).
using kernels::cluster_arrive_relaxed;
using kernels::cluster_arrive_release;
using kernels::cluster_rank;
using kernels::cluster_wait_acquire;

__device__ __forceinline__ void store_rank0_f32(uint32_t local_addr, float v) {
  kernels::cluster_store_f32(kernels::cluster_map(local_addr, 0), v);
}

// GEMM2's epilogue for one warp's tile (for_each_gemm2_output's values) into rank 0's rows: batch row r
// is sorted row row0 + r; local_tile is the tile's index in the block.
template <class WeightOf>
__device__ __forceinline__ void store_rows_to_rank0(const GemvArgs& a, const float (&acc)[1][4], int local_tile,
                                                    float2 bias, int row0, int batch_rows, WeightOf weight_of) {
  const int col = local_tile * kTileRows + ((threadIdx.x & 31) >> 2);
  for_each_gemm2_output<1>(a, acc, bias, batch_rows, weight_of, [&](int r, float y, float y8) {
    float* row = cluster_rows().v[row0 + r];
    store_rank0_f32(kernels::shared_address(row + col), y);
    store_rank0_f32(kernels::shared_address(row + col + 8), y8);
  });
}

// After every block's stores: rank 0 sums columns [col0, col0 + cols) of each token's k rows in slot
// order into a.combine_out; the other blocks leave. Every thread of the block calls it.
template <int kThreads, class Routing>
__device__ void cluster_combine(const GemvArgs& a, const Routing& local, int col0, int cols) {
  cluster_arrive_release();
  if (cluster_rank() != 0) return;
  cluster_wait_acquire();
  const ClusterRows& rows = cluster_rows();
  const int quads = min(cols, a.n - col0) / 4;
  for (int i = threadIdx.x; i < a.tokens * quads; i += kThreads) {
    const int t = i / quads, c = (i % quads) * 4;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s = 0; s < a.top_k; ++s) {
      const int row = local.pair_row[t * a.top_k + s];
      if (row < 0) continue;  // a dropped pair
      const float4 v = *reinterpret_cast<const float4*>(&rows.v[row][c]);
      acc.x += v.x;
      acc.y += v.y;
      acc.z += v.z;
      acc.w += v.w;
    }
    *reinterpret_cast<uint2*>(a.combine_out + static_cast<int64_t>(t) * a.n + col0 + c) = kernels::pack_bf16x4(acc);
  }
}

}  // namespace mxmoe::gemv
