// The grouped GEMV kernel, the swap-AB form of the family: weights on the MMA's M side, one warp per
// 16-row weight tile (optionally split over K between several warps), the expert's rows on N. A batch
// is 8 rows (one m16n8k16 bf16 MMA per 16-wide K step; 8 warps, a 128 x 8 block tile) or 16 rows (two
// MMAs per decoded weight fragment; 16 warps, a 256 x 16 block tile, no split-K): the 16-row batch
// streams an expert's weights half as often once experts hold more than 8 rows.
// Grid: x = tile groups, y = active-expert slot, z = row-batch split.
//
// Weights stream through a per-warp ring of shared-memory stages filled by cp.async.bulk and
// completed on mbarriers: the loads in flight cost no registers, so many more bytes are in flight
// per SM than register double-buffering allows, and the first stages are requested before the
// activations are staged. Layout and fragment mapping: gemv_layout.hpp, common/mma_bf16.cuh.
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "kernels/common/bf16_pack.cuh"
#include "kernels/common/bulk_copy.cuh"
#include "kernels/common/mma_bf16.cuh"
#include "kernels/common/mx_decode.cuh"
#include "kernels/common/pdl_launch.cuh"
#include "kernels/common/static_smem.hpp"
#include "kernels/gemv/gemv.hpp"
#include "kernels/gemv/gemv_device.cuh"
#include "kernels/gemv/gemv_layout.hpp"
#include "moe/cuda_check.hpp"
#include "routing/warp_topk.cuh"

namespace mxmoe::gemv {
namespace {

// Batch widths: kNb groups of 8 rows (the MMA's N). 8 rows: 8 warps per block, 3 blocks per SM at
// decode sizes; 16 rows: 16 warps per block (the staged rows take ~95 KB at K = 2880, so one block
// per SM, and it needs 16 warps to keep as many weight bytes in flight).
constexpr int kNarrowRows = 8;
__host__ __device__ constexpr int warps_for(int nb) { return nb == 1 ? 8 : 16; }
__host__ __device__ constexpr int min_blocks_for(int nb) { return nb == 1 ? 3 : 1; }
constexpr int kStageChunks = 2;   // chunks per pipeline stage (one bulk copy of 2 KiB + 128 B)
// Ring stages per warp, a template parameter (each count is its own kernel): 2 by default
// (kDefaultStages), 3 when forced where it fits.
constexpr int kMaxStages = 3;
constexpr int kMinStages = kDefaultStages;
constexpr int kStageBytes = kStageChunks * kChunkBytes;
__host__ __device__ constexpr int warp_ring_bytes(int stages) { return stages * kStageBytes; }

// Activation rows [first_row, first_row + rows) of the expert into shared memory, each group of 8
// elements permuted to the decode pair order (3,7,2,6,1,5,0,4) and each chunk's groups ordered
// (word, block). Groups past K are zeroed (they meet zero weights; garbage there could be NaN).
// Rows past `rows` are left as they are: they feed only MMA columns that are never stored.
// The (row, group) pairs of all rows are spread over the threads, kUnroll loads in flight per thread
// before any is stored: one row at a time would pay a load latency per row, serially, at block start.
// (2 for the 8-row batch, whose 80 registers spill at 4; 4 for the 16-row batch.)
template <bool kGemm1, int kThreads, int kUnroll>
__device__ void stage_rows(const GemvArgs& a, int first_row, int rows, const int* local_pairs, uint8_t* smem) {
  const int stride = act_row_stride(a.chunks);
  const int groups = a.chunks * (kChunkK / 8);
  const int total = rows * groups;
  for (int base = threadIdx.x; base < total; base += kThreads * kUnroll) {
    uint4 v[kUnroll];
    int dst[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * kThreads;
      dst[u] = -1;
      if (i < total) {
        const int r = i / groups, g = i - r * groups;
        const int row = first_row + r;
        // GEMM1 reads the token's row: its pair from the local routing, else from the permutation.
        const int64_t act_row = !kGemm1 ? row : (local_pairs ? local_pairs[r] : a.row_pair[row]) / a.top_k;
        v[u] = load_act_group<!kGemm1>(a.act + act_row * a.k, g, a.k);
        dst[u] = r * stride + staged_group_offset(g);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (dst[u] >= 0) *reinterpret_cast<uint4*>(smem + dst[u]) = permute_act_group(v[u]);
  }
}

// The per-warp weight ring: stage s holds the records of chunks [c, c + kStageChunks) of the warp's
// tile, one bulk copy (records are contiguous, see gemv_layout.hpp).
template <int kStages>
struct WeightRing {
  uint8_t* base;        // kStages * kStageBytes of shared memory
  uint64_t* bars;       // kStages mbarriers
  const uint8_t* tile;  // the tile's packed records (global)
  int c_begin, c_end;
  uint32_t seq;         // stages consumed so far by this warp (all lanes agree)

  __device__ int groups() const { return (c_end - c_begin + kStageChunks - 1) / kStageChunks; }

  // One lane only: request group `grp` into the ring slot it will occupy.
  __device__ void issue(int grp) const {
    const uint32_t slot = (seq + grp) % kStages;
    const int c = c_begin + grp * kStageChunks;
    const uint32_t bytes = min(kStageChunks, c_end - c) * kChunkBytes;
    kernels::mbarrier_arrive_expect_tx(&bars[slot], bytes);
    kernels::bulk_copy_to_shared(base + slot * kStageBytes, tile + static_cast<int64_t>(c) * kChunkBytes, bytes,
                                 &bars[slot]);
  }
};

// The routing of T <= kLocalRouteTokens tokens, computed by every block of both GEMMs (the same
// warp_route_token as the route kernel, so the same answer bit for bit) instead of a route kernel.
struct LocalRouting {
  int ids[kLocalRouteTokens * routing::kMaxTopk];        // pair -> expert
  float weights[kLocalRouteTokens * routing::kMaxTopk];  // pair -> routing weight
  int pair_row[kLocalRouteTokens * routing::kMaxTopk];   // pair -> sorted row (expert, token, slot)
  unsigned bitmap[routing::kMaxExperts / 32];            // experts with a pair
  int expert, row0, rows;                                // this block's slot: expert or -1, its rows
  int active;                                            // experts with a pair
  int row_pair[kLocalRouteTokens];                       // the slot's rows -> pair (an expert has <= T rows)
};

__device__ void local_routing(const GemvArgs& a, int slot, LocalRouting& r) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int pairs = a.tokens * a.top_k;
  if (threadIdx.x < routing::kMaxExperts / 32) r.bitmap[threadIdx.x] = 0;
  if (threadIdx.x == 0) r.expert = -1;
  __syncthreads();
  if (warp < a.tokens) {
    int my_id;
    float my_weight;
    routing::warp_route_token(a.logits + static_cast<int64_t>(warp) * a.experts, a.experts, a.top_k, a.softmax_first,
                              a.renormalize, lane, my_id, my_weight);
    if (lane < a.top_k) {
      const int p = warp * a.top_k + lane;
      r.ids[p] = my_id;
      r.weights[p] = my_weight;
      atomicOr(&r.bitmap[my_id / 32], 1u << (my_id % 32));
    }
  }
  __syncthreads();
  const int i = threadIdx.x;
  int rank_same = 0;
  if (i < pairs) {
    const int e = r.ids[i];
    int below = 0, same = 0;
    for (int j = 0; j < pairs; ++j) {
      const int f = r.ids[j];
      below += f < e;
      same += f == e;
      rank_same += f == e && j < i;
    }
    r.pair_row[i] = below + rank_same;
    int experts_below = __popc(r.bitmap[e / 32] & ((1u << (e % 32)) - 1u));
    for (int w = 0; w < e / 32; ++w) experts_below += __popc(r.bitmap[w]);
    if (rank_same == 0 && experts_below == slot) {
      r.expert = e;
      r.row0 = below;
      r.rows = same;
    }
  }
  if (threadIdx.x == 0) {
    int active = 0;
    for (int w = 0; w < (a.experts + 31) / 32; ++w) active += __popc(r.bitmap[w]);
    r.active = active;
  }
  __syncthreads();
  if (i < pairs && r.ids[i] == r.expert) r.row_pair[rank_same] = i;
  __syncthreads();
}

// The combine in GEMM2, by the last block of a column group to finish (blocks count themselves on
// the group's counter after their rows are out): each token's k rows of the group's columns summed in
// slot order in fp32, the same sums as the combine kernel (routing/combine.cu), bf16 out.
template <int kThreads>
__device__ void combine_columns(const GemvArgs& a, const LocalRouting* local, int tiles_per_block) {
  const int col0 = static_cast<int>(blockIdx.x) * tiles_per_block * kTileRows;
  const int quads = min(tiles_per_block * kTileRows, a.n - col0) / 4;
  const float* rows = static_cast<const float*>(a.out);
  for (int i = threadIdx.x; i < a.tokens * quads; i += kThreads) {
    const int t = i / quads, col = col0 + (i % quads) * 4;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s = 0; s < a.top_k; ++s) {
      const int p = t * a.top_k + s;
      const int64_t row = local ? local->pair_row[p] : a.pair_row[p];
      // Rows of other blocks of this grid: read at L2, past any stale L1 line.
      const float4 v = __ldcg(reinterpret_cast<const float4*>(rows + row * a.n + col));
      acc.x += v.x;
      acc.y += v.y;
      acc.z += v.z;
      acc.w += v.w;
    }
    *reinterpret_cast<uint2*>(a.combine_out + static_cast<int64_t>(t) * a.n + col) = kernels::pack_bf16x4(acc);
  }
}

template <bool kGemm1, bool kWideScales, int kStages, int kNb>
__global__ void __launch_bounds__(32 * warps_for(kNb), min_blocks_for(kNb))
    gemv_kernel(const GemvArgs a, const int ksplit, const int rows_cap) {
  constexpr int kWarps = warps_for(kNb), kThreads = kWarps * 32, kBatchRows = kNarrowRows * kNb;
  extern __shared__ __align__(128) uint8_t smem[];
  // Split-K partial sums, reduced in a fixed order (the 16-row batch never splits K).
  __shared__ float partial[kNb == 1 ? kWarps : 1][4][32];
  __shared__ uint64_t bars[kWarps][kStages];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0)
    for (int s = 0; s < kStages; ++s) kernels::mbarrier_init(&bars[warp][s], 1);
  kernels::fence_barrier_init();
  __syncwarp();
  // Programmatic dependent launch (docs/gpu-pipeline.md). Every kernel triggers its dependant only
  // after its own cudaGridDependencySynchronize, so when GEMM2 starts, GEMM1 is running and the
  // routing that GEMM1 waited for is complete: GEMM2 may read the routing and request its first
  // weight stages before waiting for GEMM1's output. GEMM1 starts while the route kernel runs and
  // waits for it before reading its results. At T <= kLocalRouteTokens there is no route kernel:
  // every block of both GEMMs routes the tokens itself, before it waits for anything.
  __shared__ LocalRouting local_route;
  __shared__ bool last_of_group;
  const bool local = a.local_route;
  const int slot = blockIdx.y;
  bool active;
  int expert, row0, rows;
  if (local) {
    local_routing(a, slot, local_route);
    active = local_route.expert >= 0;
    expert = active ? local_route.expert : 0;
    row0 = local_route.row0;
    rows = active ? local_route.rows : 0;
  } else {
    if constexpr (kGemm1) cudaGridDependencySynchronize();
    active = slot < *a.active_count;
    expert = active ? a.active_experts[slot] : 0;
    row0 = active ? a.expert_offsets[expert] : 0;
    rows = active ? a.expert_offsets[expert + 1] - row0 : 0;
  }
  const int g = lane >> 2, q = lane & 3;
  // Warps [t*ksplit, (t+1)*ksplit) of the block share tile t and split its K chunks.
  const int tiles_per_block = kWarps / ksplit;
  const int tile = blockIdx.x * tiles_per_block + warp / ksplit;
  const int split = warp % ksplit;
  const bool has_tile = tile < a.tiles;
  const int stride = act_row_stride(a.chunks);
  WeightRing<kStages> ring;
  ring.base = smem + act_bytes(a.chunks, rows_cap) + warp * warp_ring_bytes(kStages);
  ring.bars = bars[warp];
  ring.tile = a.weights + expert * a.expert_stride + static_cast<int64_t>(tile) * a.chunks * kChunkBytes;
  ring.c_begin = a.chunks * split / ksplit;
  ring.c_end = a.chunks * (split + 1) / ksplit;
  ring.seq = 0;
  const int groups = has_tile ? ring.groups() : 0;
  // The weights do not depend on the activations: request the first stages of the first batch now.
  const bool has_batch = static_cast<int>(blockIdx.z) * kBatchRows < rows;
  if (lane == 0 && has_batch)
    for (int grp = 0; grp < min(kStages, groups); ++grp) ring.issue(grp);
  if (!kGemm1 || local) cudaGridDependencySynchronize();
  cudaTriggerProgrammaticLaunchCompletion();
  // The previous forward's GEMM2 is complete (the wait above), and this forward's GEMM2 reads the
  // counters only after its own wait for this grid: clear them here.
  if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0) {
    if (kGemm1)
      for (int i = threadIdx.x; i < a.combine_counter_count; i += kThreads) a.combine_counters[i] = 0;
    // Routed locally, but a combine kernel follows: it needs each pair's row.
    if (!kGemm1 && local && a.combine_out == nullptr && threadIdx.x < a.tokens * a.top_k)
      a.pair_row_out[threadIdx.x] = local_route.pair_row[threadIdx.x];
  }
  if (!active) return;
  // Lanes whose batch row is past rows_cap read the last staged row: their MMA column is never stored.
  const uint8_t* b_rows[kNb];
#pragma unroll
  for (int n = 0; n < kNb; ++n) b_rows[n] = smem + min(kNarrowRows * n + g, rows_cap - 1) * stride + q * 16;

  for (int batch = blockIdx.z * kBatchRows; batch < rows; batch += gridDim.z * kBatchRows) {
    const int batch_rows = min(kBatchRows, rows - batch);
    // Later batches re-stream the tile: request their first stages before staging the rows.
    if (lane == 0 && batch != static_cast<int>(blockIdx.z) * kBatchRows)
      for (int grp = 0; grp < min(kStages, groups); ++grp) ring.issue(grp);
    stage_rows<kGemm1, kThreads, kNb == 1 ? 2 : 4>(a, row0 + batch, batch_rows, local ? local_route.row_pair + batch : nullptr, smem);
    __syncthreads();
    float chains[2][kNb][4] = {};
    for (int grp = 0; grp < groups; ++grp) {
      const uint32_t slot_index = (ring.seq + grp) % kStages;
      kernels::mbarrier_wait_parity(&ring.bars[slot_index], ((ring.seq + grp) / kStages) & 1u);
      const uint8_t* stage = ring.base + slot_index * kStageBytes;
      const int c0 = ring.c_begin + grp * kStageChunks;
#pragma unroll
      for (int u = 0; u < kStageChunks; ++u) {
        if (c0 + u >= ring.c_end) break;
        const uint8_t* record = stage + u * kChunkBytes;
        const uint4 lo = *reinterpret_cast<const uint4*>(record + lane * 16);
        const uint4 hi = *reinterpret_cast<const uint4*>(record + 512 + lane * 16);
        const uint32_t sc = *reinterpret_cast<const uint16_t*>(record + kChunkWeightBytes + lane * 2);
        mma_chunk<kWideScales, kNb>(lo, hi, sc, b_rows, (c0 + u) * kChunkK * 2, chains);
      }
      __syncwarp();  // every lane has read the stage before it is refilled
      if (lane == 0 && grp + kStages < groups) ring.issue(grp + kStages);
    }
    ring.seq += groups;
    float acc[kNb][4];
#pragma unroll
    for (int n = 0; n < kNb; ++n)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[n][j] = chains[0][n][j] + chains[1][n][j];
    if constexpr (kNb == 1) {
      if (ksplit > 1) {
#pragma unroll
        for (int j = 0; j < 4; ++j) partial[warp][j][lane] = acc[0][j];
        __syncthreads();
        if (split == 0) {
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            acc[0][j] = partial[warp][j][lane];
            for (int s = 1; s < ksplit; ++s) acc[0][j] += partial[warp + s][j][lane];
          }
        }
      }
    }
    if (has_tile && split == 0) {
      // Epilogue: this lane holds rows (g, g+8) of the tile for batch rows (8n + 2q, 8n + 2q + 1).
#pragma unroll
      for (int n = 0; n < kNb; ++n)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int r = kNarrowRows * n + 2 * q + j;
          if (r >= batch_rows) continue;
          const int64_t row = row0 + batch + r;
          if constexpr (kGemm1) {
            const int feature = tile * 8 + g;
            float gate = acc[n][j], linear = acc[n][2 + j];
            if (a.bias) {
              const uint16_t* b = a.bias + static_cast<int64_t>(expert) * a.n + 2 * feature;
              gate += __bfloat162float(__ushort_as_bfloat16(b[0]));
              linear += __bfloat162float(__ushort_as_bfloat16(b[1]));
            }
            const float act = swiglu(gate, linear, a.alpha, a.limit);
            static_cast<__nv_bfloat16*>(a.out)[row * (a.n / 2) + feature] = __float2bfloat16_rn(act);
          } else {
            const float weight =
                local ? local_route.weights[local_route.row_pair[batch + r]] : a.pair_weights[a.row_pair[row]];
            float* out = static_cast<float*>(a.out) + row * a.n + tile * kTileRows + g;
            float y0 = acc[n][j], y1 = acc[n][2 + j];
            if (a.bias) {
              const uint16_t* b = a.bias + static_cast<int64_t>(expert) * a.n + tile * kTileRows + g;
              y0 += __bfloat162float(__ushort_as_bfloat16(b[0]));
              y1 += __bfloat162float(__ushort_as_bfloat16(b[8]));
            }
            out[0] = y0 * weight;
            out[8] = y1 * weight;
          }
        }
    }
    __syncthreads();  // the staged rows and partial sums are reused by the next batch
  }
  if constexpr (!kGemm1) {
    if (a.combine_out == nullptr) return;
    // Every active block of the column group arrives once, after all its rows are written: the
    // barrier orders the block's stores before thread 0's fence and count (CUTLASS's semaphore
    // pattern); the last to arrive fences again before its threads read the group's rows.
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      const int active_count = local ? local_route.active : *a.active_count;
      last_of_group = atomicAdd(&a.combine_counters[blockIdx.x], 1) == active_count * static_cast<int>(gridDim.z) - 1;
      if (last_of_group) __threadfence();
    }
    __syncthreads();
    if (!last_of_group) return;
    combine_columns<kThreads>(a, local ? &local_route : nullptr, tiles_per_block);
  }
}

// Split K over more warps when the grid would otherwise leave SMs idle or unevenly loaded: at decode
// sizes the busiest SM's bytes, not total bandwidth, set the time. Cost of a split = blocks on the
// busiest SM x (weight bytes per block + a fixed per-block cost for staging and the reduction).
// Once the blocks at ksplit 1 fill every SM's resident slots (3 blocks each), splitting only adds
// reduction work: measured on an H200 (docs/perf-log.md), ksplit 1 then wins. (8-row batches only.)
int choose_ksplit(int tiles, int chunks, int max_active, int sm_count) {
  constexpr int kWarps = warps_for(1);
  constexpr int64_t kBlockOverheadBytes = 8192;
  constexpr int kResidentBlocksPerSm = min_blocks_for(1);
  if (static_cast<int64_t>((tiles + kWarps - 1) / kWarps) * max_active >= int64_t{kResidentBlocksPerSm} * sm_count) return 1;
  int best = 1;
  int64_t best_cost = INT64_MAX;
  for (int ksplit = 1; ksplit <= kWarps; ksplit *= 2) {
    const int tiles_per_block = kWarps / ksplit;
    const int64_t blocks = static_cast<int64_t>((tiles + tiles_per_block - 1) / tiles_per_block) * max_active;
    const int64_t per_sm = (blocks + sm_count - 1) / sm_count;
    const int64_t cost = per_sm * (static_cast<int64_t>(tiles_per_block) * chunks * kChunkWeightBytes + kBlockOverheadBytes);
    if (cost < best_cost) {
      best = ksplit;
      best_cost = cost;
    }
  }
  return best;
}

int nb_of(int batch_rows) { return batch_rows / kNarrowRows; }

size_t smem_for(int k, int rows_cap, int stages, int nb) {
  const int chunks = (k / 32 + kChunkBlocks - 1) / kChunkBlocks;
  return static_cast<size_t>(act_bytes(chunks, rows_cap)) + warps_for(nb) * warp_ring_bytes(stages);
}

template <bool kGemm1>
void launch(const GemvArgs& a, int64_t tokens, int max_active, cudaStream_t stream) {
  if (tokens == 0 || max_active == 0) return;
  MXMOE_REQUIRE(batch_rows_built(a.batch_rows), "gemv: batch_rows ", a.batch_rows, " is not built in this profile");
  MXMOE_REQUIRE(a.batch_rows == kNarrowRows || a.stages == kMinStages, "gemv: 16-row batches run with ",
                kMinStages, " ring stages only, got ", a.stages);
  const int nb = nb_of(a.batch_rows);
  const int ksplit = nb == 1 ? ksplit_for(a, max_active) : 1;
  const int tiles_per_block = warps_for(nb) / ksplit;
  // An expert has at most `tokens` rows (top-k experts are distinct), so smaller batches need less
  // shared memory for the staged rows, and more blocks fit per SM.
  const int rows_cap = static_cast<int>(std::min<int64_t>(a.batch_rows, tokens));
  const int64_t pairs = tokens * a.top_k;
  const int64_t batches = (pairs + int64_t{a.batch_rows} * max_active - 1) / (int64_t{a.batch_rows} * max_active);
  const dim3 grid((a.tiles + tiles_per_block - 1) / tiles_per_block, static_cast<unsigned>(max_active),
                  static_cast<unsigned>(std::clamp<int64_t>(batches, 1, 64)));
  const size_t smem = smem_for(a.k, rows_cap, a.stages, nb);
  const dim3 block(32 * warps_for(nb));
  auto go = [&](auto kernel) { kernels::launch_with_pdl(kernel, grid, block, smem, stream, a, ksplit, rows_cap); };
#if !defined(MXMOE_MINIMAL)
  if (nb == 2) {
    a.wide_scales ? go(gemv_kernel<kGemm1, true, kMinStages, 2>) : go(gemv_kernel<kGemm1, false, kMinStages, 2>);
    return;
  }
  if (a.stages == kMaxStages) {
    a.wide_scales ? go(gemv_kernel<kGemm1, true, kMaxStages, 1>) : go(gemv_kernel<kGemm1, false, kMaxStages, 1>);
    return;
  }
#endif
  a.wide_scales ? go(gemv_kernel<kGemm1, true, kMinStages, 1>) : go(gemv_kernel<kGemm1, false, kMinStages, 1>);
}

}  // namespace

size_t smem_bytes(int k, int stages) { return smem_for(k, kNarrowRows, stages, 1); }

bool stages_fit(int k, int stages, size_t smem_per_block_optin, size_t static_smem) {
  return smem_bytes(k, stages) + static_smem <= smem_per_block_optin;
}

bool wide_batch_fits(int k, size_t smem_per_block_optin, size_t static_smem) {
  return batch_rows_built(kWideBatchRows) &&
         smem_for(k, kWideBatchRows, kMinStages, 2) + static_smem <= smem_per_block_optin;
}

int max_k(size_t smem_per_block_optin, size_t static_smem) {
  const int64_t room = static_cast<int64_t>(smem_per_block_optin) - static_cast<int64_t>(static_smem) -
                       warps_for(1) * warp_ring_bytes(kMinStages) - 128;
  const int64_t chunks = (room / kNarrowRows - 64) / (kChunkK * 2);
  return static_cast<int>(std::max<int64_t>(chunks, 0) * kChunkK);
}

namespace {
template <class F>
void for_each_variant(F&& f) {
#if !defined(MXMOE_MINIMAL)
  f(gemv_kernel<true, false, kMaxStages, 1>);
  f(gemv_kernel<true, true, kMaxStages, 1>);
  f(gemv_kernel<false, false, kMaxStages, 1>);
  f(gemv_kernel<false, true, kMaxStages, 1>);
  f(gemv_kernel<true, false, kMinStages, 2>);
  f(gemv_kernel<true, true, kMinStages, 2>);
  f(gemv_kernel<false, false, kMinStages, 2>);
  f(gemv_kernel<false, true, kMinStages, 2>);
#endif
  f(gemv_kernel<true, false, kMinStages, 1>);
  f(gemv_kernel<true, true, kMinStages, 1>);
  f(gemv_kernel<false, false, kMinStages, 1>);
  f(gemv_kernel<false, true, kMinStages, 1>);
}
}  // namespace

size_t static_smem_bytes() {
  return kernels::max_static_smem([](auto f) { for_each_variant(f); });
}

// Every variant may use all the dynamic shared memory the device allows next to its static part: one
// process-wide setting that no runner of another shape can undercut.
void configure(size_t smem_per_block_optin) {
  for_each_variant([&](auto kernel) {
    cudaFuncAttributes attr{};
    MXMOE_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
    MXMOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem_per_block_optin - attr.sharedSizeBytes)));
  });
}

void launch_gemm1(const GemvArgs& args, int64_t tokens, int max_active, cudaStream_t stream) {
  GemvArgs a = args;
  a.tokens = static_cast<int>(tokens);
  a.local_route = tokens <= kLocalRouteTokens && a.logits != nullptr;
  launch<true>(a, tokens, max_active, stream);
}
void launch_gemm2(const GemvArgs& args, int64_t tokens, int max_active, cudaStream_t stream) {
  GemvArgs a = args;
  a.tokens = static_cast<int>(tokens);
  a.local_route = tokens <= kLocalRouteTokens && a.logits != nullptr;
  MXMOE_REQUIRE(a.combine_out == nullptr || (tokens <= kFusedCombineTokens && a.combine_counters != nullptr &&
                                             (a.local_route || a.pair_row != nullptr)),
                "gemv: the combine in GEMM2 needs T <= ", kFusedCombineTokens, ", its counters and the pair rows");
  MXMOE_REQUIRE(!a.local_route || a.combine_out != nullptr || a.pair_row_out != nullptr,
                "gemv: GEMM2 routed locally must write the pair rows for the combine kernel");
  launch<false>(a, tokens, max_active, stream);
}

int ksplit_for(const GemvArgs& args, int max_active) {
  if (args.ksplit_override > 0) return args.ksplit_override;
  return choose_ksplit(args.tiles, args.chunks, max_active, args.sm_count);
}

}  // namespace mxmoe::gemv
