#pragma once
// The block-level pieces of the GEMV family's kernels (gemv_kernel.cu, cluster_combine.cuh): the block
// shapes, activation staging, the per-warp weight ring and its consumer loop, the split-K sum, both
// epilogues, the routing a block does itself at small T, and the combine done by a GEMM2 block.
#include <cuda_bf16.h>

#include <climits>
#include <cstdint>

#include "common/bf16_pack.cuh"
#include "kernels/common/bulk_copy.cuh"
#include "kernels/common/cp_async.cuh"
#include "kernels/gemv/gemv.hpp"
#include "kernels/gemv/gemv_device.cuh"
#include "layout/gemv_layout.hpp"
#include "common/routed_pairs.cuh"
#include "common/warp_topk.cuh"

namespace mxmoe::gemv {

// Batch widths: kNb groups of 8 rows (the MMA's N). 8 rows: 8 warps per block, 3 blocks per SM at
// decode sizes; 16 rows: 16 warps per block (the staged rows take ~95 KB at K = 2880, so one block
// per SM, and it needs 16 warps to keep as many weight bytes in flight).
inline constexpr int kNarrowRows = 8;
__host__ __device__ constexpr int warps_for(int nb) { return nb == 1 ? 8 : 16; }
// The register bound of __launch_bounds__: 3 blocks of 8 warps per SM on Hopper, where 3 fit in shared
// memory at decode sizes; 2 in SM120/SM121 code, whose 100 KB per SM hold fewer, so its registers are
// not squeezed into spills. (Host code, for its resident-block estimates, sees Hopper's 3.)
__host__ __device__ constexpr int min_blocks_for(int nb) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
  return nb == 1 ? 2 : 1;
#else
  return nb == 1 ? 3 : 1;
#endif
}
inline constexpr int kStageChunks = 2;  // chunks per pipeline stage (one bulk copy of 2 KiB + 128 B)
inline constexpr int kStageBytes = kStageChunks * kChunkBytes;
__host__ __device__ constexpr int warp_ring_bytes(int stages) { return stages * kStageBytes; }

// Activation rows [first_row, first_row + rows) of the expert into shared memory, each group of 8
// elements permuted to the decode pair order (3,7,2,6,1,5,0,4) and each chunk's groups ordered
// (word, block). Groups past K are zeroed (they meet zero weights; garbage there could be NaN).
// Rows past `rows` are left as they are: no lane reads them (the lanes past a batch's rows read its
// last row: gemv_kernel.cu).
// The (row, group) pairs of all rows are spread over the threads, kUnroll loads in flight per thread
// before any is stored: one row at a time would pay a load latency per row, serially, at block start.
// (2 for the 8-row batch, whose 80 registers spill at 4; 4 for the 16-row batch.)
// GEMM1 reads each row's token: `pairs` (this batch's rows -> pair, from the block's own routing)
// or else the permutation's row -> pair.
template <bool kGemm1, int kThreads, int kUnroll>
__device__ void stage_rows(const GemvArgs& a, int first_row, int rows, const int* pairs, uint8_t* smem) {
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
        const int64_t act_row = !kGemm1 ? row : (pairs ? pairs[r] : a.row_pair[row]) / a.top_k;
        v[u] = load_act_group<!kGemm1>(a.act + act_row * a.k, g, a.k);
        dst[u] = r * stride + staged_group_offset(g);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (dst[u] >= 0) *reinterpret_cast<uint4*>(smem + dst[u]) = permute_act_group(v[u]);
  }
}

// The per-warp weight ring: each stage holds the records of kStageChunks consecutive chunks of the
// warp's range of a tile, one bulk copy, or below sm_90 the warp's cp.async copies (records are
// contiguous, see gemv_layout.hpp). A range always starts in slot 0 (every slot is free between
// ranges), so a ring can be pointed at another range (`retarget`) at any time; `phases` keeps each
// slot's mbarrier parity across ranges. Addresses are shared-window addresses held in registers: the
// loop's bookkeeping is a few instructions per stage.
// A range that ends with the tile's last chunk leaves out that record's padding (tail_cut_bytes: half
// of it at gpt-oss's K = 2880, 2.2% of the weight bytes); the kernel decodes whatever the slot held
// there, finite e2m1 codes (their scales, 127, are copied) that meet the staged rows' zeros past K.
template <int kStages>
struct WeightRing {
  uint32_t slots;       // shared address of slot 0 (kStages * kStageBytes)
  uint32_t bars;        // shared address of the kStages mbarriers, 8 bytes apart
  uint32_t phases;      // bit s: the parity of slot s's next completion (all lanes agree)
  const uint8_t* src;   // global address of the range's first record
  int c_begin, chunks;  // the range: chunks [c_begin, c_begin + chunks) of the tile
  int end_cut;          // bytes the range's last stage leaves out (tail_cut_bytes, or 0)

  __device__ void init(const uint8_t* base, const uint64_t* barriers) {
    slots = kernels::shared_address(base);
    bars = kernels::shared_address(barriers);
    phases = 0;
  }

  __device__ int groups() const { return (chunks + kStageChunks - 1) / kStageChunks; }

  // Split `split` of `ksplit` of the chunks of the tile whose records start at tile_records.
  __device__ void retarget(const kernels::GroupedWeights& a, const uint8_t* tile_records, int split, int ksplit) {
    const int begin = a.chunks * split / ksplit, end = a.chunks * (split + 1) / ksplit;
    src = tile_records + static_cast<int64_t>(begin) * kChunkBytes;
    c_begin = begin;
    chunks = end - begin;
    end_cut = end == a.chunks ? tail_cut_bytes(a.k / 32) : 0;
  }

  // The lanes that request stages (issue, issue_first): lane 0's bulk copy, or below sm_90 (no bulk
  // copies) every lane's share of the stage (warp_copy_to_shared; the slots' barriers then expect
  // kArrivals per phase).
#if MXMOE_HAS_SM90_ASYNC
  static constexpr uint32_t kArrivals = 1;
  __device__ static bool issuer(int lane) { return lane == 0; }
#else
  static constexpr uint32_t kArrivals = kernels::kWarpCopyArrivals;
  __device__ static bool issuer(int) { return true; }
#endif

  // The issuers only: request group `grp` of the range into ring slot `slot`.
  __device__ void issue(int slot, int grp) const {
    const int c = grp * kStageChunks;
    const uint32_t bytes = c + kStageChunks >= chunks ? (chunks - c) * kChunkBytes - end_cut : kStageBytes;
    const uint32_t bar = bars + slot * 8;
#if MXMOE_HAS_SM90_ASYNC
    kernels::mbarrier_arrive_expect_tx(bar, bytes);
    kernels::bulk_copy_to_shared(slots + slot * kStageBytes, src + static_cast<int64_t>(c) * kChunkBytes, bytes, bar);
#else
    kernels::warp_copy_to_shared(slots + slot * kStageBytes, src + static_cast<int64_t>(c) * kChunkBytes, bytes, bar);
#endif
  }
  // The issuers only: request the first stages of the current range (every slot must be free).
  __device__ void issue_first(int groups) const {
    for (int grp = 0; grp < min(kStages, groups); ++grp) issue(grp, grp);
  }
};

// The warp's whole range: waits for each stage (its first min(kStages, groups) requested before),
// runs its chunks through mma_chunk and refills the slot kStages groups ahead. Every slot is free
// again on return. b_rows: shared addresses of the lane's B rows (chunk 0).
template <bool kWideScales, int kStages, int kNb>
__device__ __forceinline__ void consume_ring(WeightRing<kStages>& ring, int groups, const uint32_t (&b_rows)[kNb],
                                             float (&chains)[2][kNb][4]) {
  const int lane = threadIdx.x & 31;
  uint32_t offset = ring.c_begin * (kChunkK * 2);  // bytes into the staged rows
  int slot = 0;
  for (int grp = 0; grp < groups; ++grp) {
    kernels::mbarrier_wait_parity(ring.bars + slot * 8, (ring.phases >> slot) & 1u);
    ring.phases ^= 1u << slot;
    const uint32_t stage = ring.slots + slot * kStageBytes;
    const int in_stage = min(kStageChunks, ring.chunks - grp * kStageChunks);
#pragma unroll
    for (int u = 0; u < kStageChunks; ++u) {
      if (u > 0 && u >= in_stage) break;
      mma_chunk<kWideScales>(load_chunk_words(stage + u * kChunkBytes, lane), b_rows, offset, chains);
      offset += kChunkK * 2;
    }
    __syncwarp();  // every lane has read the stage before it is refilled
    if (ring.issuer(lane) && grp + kStages < groups) ring.issue(slot, grp + kStages);
    slot = slot + 1 == kStages ? 0 : slot + 1;
  }
}

// The two chains of a warp summed, then (ksplit > 1) the split's warps summed in a fixed order into
// the first warp of each tile through `partial` [kWarps][4][32]. Every thread of the block calls it.
template <int kNb, int kWarps>
__device__ __forceinline__ void sum_chains(const float (&chains)[2][kNb][4], float (&acc)[kNb][4], int ksplit,
                                           float (*partial)[4][32]) {
#pragma unroll
  for (int n = 0; n < kNb; ++n)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[n][j] = chains[0][n][j] + chains[1][n][j];
  if constexpr (kNb == 1) {
    if (ksplit > 1) {
      const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
      for (int j = 0; j < 4; ++j) partial[warp][j][lane] = acc[0][j];
      __syncthreads();
      if (warp % ksplit == 0) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          acc[0][j] = partial[warp][j][lane];
          for (int s = 1; s < ksplit; ++s) acc[0][j] += partial[warp + s][j][lane];
        }
      }
    }
  }
}

// Two bias values of an expert (bf16 -> fp32): output rows `first` and `first + step`; zeros without
// a bias.
__device__ __forceinline__ float2 load_bias_pair(const GemvArgs& a, int expert, int first, int step) {
  if (!a.bias) return make_float2(0.f, 0.f);
  const uint16_t* b = a.bias + static_cast<int64_t>(expert) * a.n + first;
  return make_float2(__bfloat162float(__ushort_as_bfloat16(b[0])), __bfloat162float(__ushort_as_bfloat16(b[step])));
}

// f(n, j, r) for each accumulator column this lane holds (MMA n, column pair j) whose batch row r is
// below batch_rows: the lane holds batch rows 8n + 2q and 8n + 2q + 1.
template <int kNb, class F>
__device__ __forceinline__ void for_each_batch_row(int batch_rows, F f) {
  const int q = threadIdx.x & 3;
#pragma unroll
  for (int n = 0; n < kNb; ++n)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int r = kNarrowRows * n + 2 * q + j;
      if (r < batch_rows) f(n, j, r);
    }
}

// The lane's outputs of a warp's tile: GEMM1's intermediate feature (its gate and linear are rows
// g and g+8) and GEMM2's first column (the second is 8 further).
__device__ __forceinline__ int gemm1_feature(int tile) { return tile * 8 + ((threadIdx.x & 31) >> 2); }
__device__ __forceinline__ int gemm2_column(int tile) { return tile * kTileRows + ((threadIdx.x & 31) >> 2); }

// The bias pair each epilogue below adds for the lane: loaded by the kernels before their main loop,
// so the load's latency is not paid after it.
__device__ __forceinline__ float2 gemm1_bias(const GemvArgs& a, int tile, int expert) {
  return load_bias_pair(a, expert, 2 * gemm1_feature(tile), 1);
}
__device__ __forceinline__ float2 gemm2_bias(const GemvArgs& a, int tile, int expert) {
  return load_bias_pair(a, expert, gemm2_column(tile), 8);
}

// GEMM1's epilogue for one warp's tile: bias (gemm1_bias), clamped interleaved SwiGLU, bf16 out. The
// lane holds rows (g, g+8) of the tile: a gate and its linear. No add without a bias: -0 stays -0.
template <int kNb>
__device__ __forceinline__ void store_gemm1(const GemvArgs& a, const float (&acc)[kNb][4], int tile, float2 bias,
                                            int64_t first_row, int batch_rows) {
  const int feature = gemm1_feature(tile);
  for_each_batch_row<kNb>(batch_rows, [&](int n, int j, int r) {
    float gate = acc[n][j], linear = acc[n][2 + j];
    if (a.bias) {
      gate += bias.x;
      linear += bias.y;
    }
    const float act = swiglu(gate, linear, a.alpha, a.limit);
    static_cast<__nv_bfloat16*>(a.out)[(first_row + r) * (a.n / 2) + feature] = __float2bfloat16_rn(act);
  });
}

// GEMM2's outputs of one warp's tile: bias (gemm2_bias), times the routing weight. weight_of(r) gives
// batch row r's routing weight; store(r, y, y8) takes batch row r's values of the lane's column and of
// the column 8 further. Every GEMM2 epilogue computes its values here, so they agree bit for bit.
template <int kNb, class WeightOf, class Store>
__device__ __forceinline__ void for_each_gemm2_output(const GemvArgs& a, const float (&acc)[kNb][4], float2 bias,
                                                      int batch_rows, WeightOf weight_of, Store store) {
  for_each_batch_row<kNb>(batch_rows, [&](int n, int j, int r) {
    const float weight = weight_of(r);
    float y0 = acc[n][j], y1 = acc[n][2 + j];
    if (a.bias) {
      y0 += bias.x;
      y1 += bias.y;
    }
    store(r, y0 * weight, y1 * weight);
  });
}

// GEMM2's epilogue for one warp's tile: its outputs as fp32 rows for the combine.
template <int kNb, class WeightOf>
__device__ __forceinline__ void store_gemm2(const GemvArgs& a, const float (&acc)[kNb][4], int tile, float2 bias,
                                            int64_t first_row, int batch_rows, WeightOf weight_of) {
  const int col = gemm2_column(tile);
  for_each_gemm2_output<kNb>(a, acc, bias, batch_rows, weight_of, [&](int r, float y, float y8) {
    float* out = static_cast<float*>(a.out) + (first_row + r) * a.n + col;
    out[0] = y;
    out[8] = y8;
  });
}

// The routing of T <= kMaxLocalRouteTokens tokens, computed by a block itself (the route kernel's
// selection, warp_route_logits, so the same answer bit for bit) instead of by a route kernel. Rows are sorted
// by (expert, token, slot) as the permutation sorts them; slot s is the s-th expert with a pair.
inline constexpr int kLocalPairs = kMaxLocalRouteTokens * routing::kMaxTopk;
static_assert(kLocalPairs <= 32, "local_routing ranks the pairs one per lane of a warp");
struct LocalRouting {
  int ids[kLocalPairs];          // pair -> expert
  float weights[kLocalPairs];    // pair -> routing weight
  int pair_row[kLocalPairs];     // pair -> sorted row
  int row_pair[kLocalPairs];     // sorted row -> pair
  int slot_expert[kLocalPairs];  // slot -> expert (slots below `active`)
  int slot_row0[kLocalPairs];    // slot -> its first sorted row
  int slot_rows[kLocalPairs];    // slot -> its rows
  int active;                    // experts with a pair
};

// Lane p's pair p = t * k + s (slot s of token t) from the logits, when lane p < T * k: e, weight.
// Warp-collective.
__device__ __forceinline__ void local_pairs_from_logits(const GemvArgs& a, int lane, int& e, float& weight) {
  // The next token's logits are requested before this token's selection: about one load latency
  // for the whole routing, not one per token (and one copy of the selection code, not T).
  float raw[routing::kMaxPerLane], next[routing::kMaxPerLane];
  routing::load_logits(a.logits, a.experts, lane, raw);
#pragma unroll 1
  for (int t = 0; t < a.tokens; ++t) {
    if (t + 1 < a.tokens)
      routing::load_logits(a.logits + static_cast<int64_t>(t + 1) * a.experts, a.experts, lane, next);
    int my_id;
    float my_weight;
    routing::warp_route_logits(raw, a.experts, a.top_k, a.softmax_first, a.renormalize, lane, my_id, my_weight);
    const int s = lane - t * a.top_k;
    const int id_s = __shfl_sync(0xffffffffu, my_id, s & 31);
    const float weight_s = __shfl_sync(0xffffffffu, my_weight, s & 31);
    if (s >= 0 && s < a.top_k) {
      e = id_s;
      weight = weight_s;
    }
    if (t + 1 < a.tokens)
#pragma unroll
      for (int j = 0; j < routing::kMaxPerLane; ++j) raw[j] = next[j];
  }
}

// Every thread of the block calls it; reads a.logits, or a.topk_ids and a.topk_weights (as the route
// kernel reads them). Warp 0 does all of it, in registers, and the block meets once: the other warps'
// barriers would sit on the chain of a block that is waiting to request its weights (GEMM2's blocks
// start as GEMM1's leave, and this is on their path).
__device__ inline void local_routing(const GemvArgs& a, LocalRouting& r) {
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    const int pairs = a.tokens * a.top_k;
    // Lane p takes pair p = t * k + s: slot s of token t's routing.
    int e = INT_MAX;
    float weight = 0.f;
    if (a.topk_ids != nullptr) {
      int id;
      float w;
      routing::load_routed_pairs(a.topk_ids, a.ids64, a.topk_weights, 0, pairs, a.top_k, a.experts, lane, id, w);
      if (lane < pairs && id != kDroppedPairId) {
        e = id;
        weight = w;
      }
    } else {
      local_pairs_from_logits(a, lane, e, weight);
    }
    // A dropped pair keeps e = INT_MAX: below no live pair, and no row of its own.
    const bool live = lane < pairs && e != INT_MAX;
    // Pairs with a lower expert (below), and earlier pairs of the same expert (rank_same).
    unsigned below = 0;
    for (int j = 0; j < pairs; ++j) below |= static_cast<unsigned>(__shfl_sync(0xffffffffu, e, j) < e) << j;
    const unsigned valid = __ballot_sync(0xffffffffu, live);
    const unsigned same = __match_any_sync(0xffffffffu, e) & valid;
    const int rank_same = __popc(same & ((1u << lane) - 1u));
    const unsigned heads = __ballot_sync(0xffffffffu, live && rank_same == 0);
    if (lane < pairs && !live) {
      r.ids[lane] = kDroppedPairId;
      r.weights[lane] = 0.f;
      r.pair_row[lane] = -1;  // the combines skip it
    }
    if (live) {
      const int row = __popc(below) + rank_same;
      r.ids[lane] = e;
      r.weights[lane] = weight;
      r.pair_row[lane] = row;
      r.row_pair[row] = lane;
      if (rank_same == 0) {
        const int slot = __popc(below & heads);
        r.slot_expert[slot] = e;
        r.slot_row0[slot] = __popc(below);
        r.slot_rows[slot] = __popc(same);
      }
    }
    if (lane == 0) r.active = __popc(heads);
  }
  __syncthreads();
}

// The combine of GEMM2's columns [col0, col0 + cols) by the last GEMM2 block to finish them: each
// token's k rows summed in slot order in fp32, the same sums as the combine kernel
// (routing/combine.cu), bf16 out. Rows come from `local` (the block's routing) or a.pair_row.
template <int kThreads>
__device__ void combine_columns(const GemvArgs& a, const LocalRouting* local, int col0, int cols) {
  const int quads = min(cols, a.n - col0) / 4;
  const float* rows = static_cast<const float*>(a.out);
  for (int i = threadIdx.x; i < a.tokens * quads; i += kThreads) {
    const int t = i / quads, col = col0 + (i % quads) * 4;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s = 0; s < a.top_k; ++s) {
      const int p = t * a.top_k + s;
      const int64_t row = local ? local->pair_row[p] : a.pair_row[p];
      if (row < 0) continue;  // a dropped pair
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

}  // namespace mxmoe::gemv
