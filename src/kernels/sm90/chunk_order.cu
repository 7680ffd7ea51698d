// chunk_order.hpp: one stored 16-byte group per thread, grid-stride. Stored group j of a chunk holds
// pair p = j % 4 of word w = j / 4 of blocks 0..3: natural elements 32q + 8w + (3 - p) + 4i (the half
// chunk: below).
#include "kernels/sm90/chunk_order.hpp"

#include <algorithm>

#include "common/pdl_launch.cuh"
#include "common/cuda_check.hpp"

namespace mxmoe::sm90 {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    chunk_order_kernel(const uint16_t* in, uint4* out, int64_t groups, int k, int groups_per_row, const int32_t* row_pair,
                       int top_k, const int32_t* live_rows) {
  kernels::pdl_wait();  // `in` and `row_pair` may come from the predecessors
  kernels::pdl_trigger();
  if (live_rows != nullptr) groups = min(groups, int64_t{*live_rows} * groups_per_row);
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < groups; i += int64_t{gridDim.x} * kThreads) {
    const int64_t row = i / groups_per_row;
    const int gi = static_cast<int>(i % groups_per_row);
    const int j = gi & 15, p = j & 3;
    const int chunk = (gi >> 4) * gemv::kChunkK;
    // The half chunk (chunk_order.hpp): group j < 8 holds pair p of words 2 (q % 2) + j / 4 of blocks
    // q / 2 (q = 0..3); groups 8..15 are padding.
    const bool tail = half_tail(k) && chunk + gemv::kChunkK > k;
    const int64_t source = row_pair ? row_pair[row] / top_k : row;
    const uint16_t* src = in + source * k;
    uint32_t v[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int k0 = tail ? (j < 8 ? chunk + 32 * (q >> 1) + 8 * (2 * (q & 1) + (j >> 2)) + (3 - p) : k)
                          : chunk + 32 * q + 8 * (j >> 2) + (3 - p),
                k1 = k0 + 4;
      const uint32_t lo = k0 < k ? src[k0] : 0u, hi = k1 < k ? src[k1] : 0u;
      v[q] = lo | (hi << 16);
    }
    out[i] = make_uint4(v[0], v[1], v[2], v[3]);
  }
}

}  // namespace

void to_chunk_order(const uint16_t* in, uint16_t* out, int64_t rows, int k, cudaStream_t stream, const int32_t* row_pair,
                    int top_k, const int32_t* live_rows) {
  MXMOE_REQUIRE(k > 0, "to_chunk_order: k must be positive, got ", k);
  MXMOE_REQUIRE(top_k > 0, "to_chunk_order: top_k must be positive, got ", top_k);
  MXMOE_REQUIRE(rows >= 0, "to_chunk_order: rows must not be negative, got ", rows);
  MXMOE_REQUIRE(reinterpret_cast<uintptr_t>(out) % 16 == 0, "to_chunk_order: out must be 16-byte aligned");
  const int groups_per_row = static_cast<int>(padded_k(k) / 8);
  const int64_t groups = rows * groups_per_row;
  if (groups == 0) return;
  const int blocks = static_cast<int>(std::min<int64_t>((groups + kThreads - 1) / kThreads, 4096));
  kernels::launch_with_pdl(chunk_order_kernel, dim3(blocks), dim3(kThreads), 0, stream, in,
                           reinterpret_cast<uint4*>(out), groups, k, groups_per_row, row_pair, top_k, live_rows);
}

}  // namespace mxmoe::sm90
