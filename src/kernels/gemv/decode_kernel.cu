// The fused decode kernel and its combine (decode.hpp says why). One block of 16 warps per SM.
//
// Unit u = (active-expert slot u / S, K block f = u % S of GEMM2), S = I / 32. For a unit, warps
// 4t..4t+3 compute GEMM1 tile 4f + t (gate and linear rows of features 8(4f+t) .. +7, gemv_layout.hpp)
// with K split four ways; the block sums the four partial tiles in a fixed order, adds the bias,
// applies SwiGLU and rounds the 32 features to bf16 in shared memory (the reference's intermediate);
// then warp w multiplies them into GEMM2 tiles [w*H/256, (w+1)*H/256) of K block f (slice_layout.hpp)
// and keeps the partial sums in registers until its run of units moves to another expert.
//
// Each warp streams its own sequence of weight pieces (per unit: its GEMM1 chunks two per stage,
// then its GEMM2 records eight per stage; 2176 bytes either way) through a ring of shared-memory
// stages filled by cp.async.bulk, requested kStages pieces ahead across unit boundaries.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "kernels/common/bulk_copy.cuh"
#include "kernels/common/mma_bf16.cuh"
#include "kernels/common/mx_decode.cuh"
#include "kernels/common/pdl_launch.cuh"
#include "kernels/gemv/decode.hpp"
#include "kernels/gemv/gemv_device.cuh"
#include "kernels/gemv/gemv_layout.hpp"
#include "kernels/gemv/slice_layout.hpp"
#include "moe/cuda_check.hpp"
#include "routing/warp_topk.cuh"

namespace mxmoe::gemv {
namespace {

constexpr int kWarps = 16;
constexpr int kThreads = kWarps * 32;
constexpr int kUnitFeatures = 32;                      // one MX block of GEMM2's K
constexpr int kUnitTiles = kUnitFeatures / 8;          // GEMM1 tiles per unit (8 features each)
constexpr int kSplitK = kWarps / kUnitTiles;           // warps sharing one GEMM1 tile
constexpr int kMaxTiles2 = 12;                         // GEMM2 tiles per warp: H <= 16 * 16 * 12
constexpr int kStageBytes = 2 * kChunkBytes;           // 2 GEMV chunks = 8 slice records
constexpr int kStageRecords2 = kStageBytes / kSliceRecordBytes;
static_assert(kStageRecords2 * kSliceRecordBytes == kStageBytes, "a stage holds whole records of both kinds");
static_assert(kMaxTiles2 <= 2 * kStageRecords2, "a warp's GEMM2 tiles of one unit take at most two stages");
constexpr int kMaxPairs = kDecodeMaxTokens * kMaxTopk;
constexpr int kMaxStages = 4;

// The routing of the batch, made by every block (so no block waits for another).
struct BlockRoute {
  int ids[kMaxPairs];
  float weights[kMaxPairs];
  unsigned bitmap[kMaxExperts / 32];
  int active;
  int slot_expert[kMaxPairs];
  int slot_rows[kMaxPairs];
  int slot_tokens[kMaxPairs][kDecodeMaxTokens];
  int pair_slot[kMaxPairs];
  int pair_row[kMaxPairs];
};

// Top-k + weights per token (warp_route_token, as the route kernel), then slots (active experts
// ascending) and rows (tokens ascending within an expert), as the permute step orders them.
__device__ void route_block(const DecodeArgs& a, BlockRoute& rt) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  if (tid < kMaxExperts / 32) rt.bitmap[tid] = 0;
  __syncthreads();
  if (warp < a.tokens) {
    int id;
    float weight;
    routing::warp_route_token(a.logits + static_cast<int64_t>(warp) * a.experts, a.experts, a.top_k,
                              a.softmax_first, a.renormalize, lane, id, weight);
    if (lane < a.top_k) {
      rt.ids[warp * a.top_k + lane] = id;
      rt.weights[warp * a.top_k + lane] = weight;
      atomicOr(&rt.bitmap[id / 32], 1u << (id % 32));
    }
  }
  __syncthreads();
  const int pairs = a.tokens * a.top_k;
  if (tid < pairs) {
    const int e = rt.ids[tid];
    int slot = __popc(rt.bitmap[e / 32] & ((1u << (e % 32)) - 1u));
    for (int w = 0; w < e / 32; ++w) slot += __popc(rt.bitmap[w]);
    int row = 0, count = 0;
    for (int j = 0; j < pairs; ++j)
      if (rt.ids[j] == e) {
        ++count;
        row += j < tid;  // a token routes to an expert at most once: earlier pairs are earlier tokens
      }
    rt.pair_slot[tid] = slot;
    rt.pair_row[tid] = row;
    rt.slot_tokens[slot][row] = tid / a.top_k;
    if (row == 0) {
      rt.slot_expert[slot] = e;
      rt.slot_rows[slot] = count;
    }
  }
  if (tid == 0) {
    int active = 0;
    for (int w = 0; w < kMaxExperts / 32; ++w) active += __popc(rt.bitmap[w]);
    rt.active = active;
  }
  __syncthreads();
}

// GEMM2 records [kBase, kBase + count) of the warp's tiles from one stage: two MMAs each (K steps 0
// and 1 of the block), into acc[kBase + i].
template <bool kWide, int kBase>
__device__ __forceinline__ void gemm2_stage(const uint8_t* stage, int count, int lane, const uint32_t (&b)[4],
                                            float (&acc)[kMaxTiles2][4]) {
  const int g = lane >> 2;
#pragma unroll
  for (int i = 0; i < kStageRecords2; ++i) {
    if (kBase + i < kMaxTiles2 && i < count) {
      const uint8_t* rec = stage + i * kSliceRecordBytes;
      const uint2 w = *reinterpret_cast<const uint2*>(rec + lane * 8);
      const uint32_t sc = *reinterpret_cast<const uint16_t*>(rec + kSliceWeightBytes + 2 * g);
      uint32_t m_lo, h_lo, m_hi, h_hi;
      scale_multipliers<kWide>(sc & 0xFFu, m_lo, h_lo);  // row g
      scale_multipliers<kWide>(sc >> 8, m_hi, h_hi);     // row g + 8
      float(&c)[4] = acc[(kBase + i) % kMaxTiles2];
      uint32_t x[4];
      kernels::decode_e2m1x8_packed(w.x, x);
      kernels::mma_m16n8k16_bf16(c, apply_scale<kWide>(x[0], m_lo, h_lo), apply_scale<kWide>(x[1], m_hi, h_hi),
                                 apply_scale<kWide>(x[2], m_lo, h_lo), apply_scale<kWide>(x[3], m_hi, h_hi), b[0], b[1]);
      kernels::decode_e2m1x8_packed(w.y, x);
      kernels::mma_m16n8k16_bf16(c, apply_scale<kWide>(x[0], m_lo, h_lo), apply_scale<kWide>(x[1], m_hi, h_hi),
                                 apply_scale<kWide>(x[2], m_lo, h_lo), apply_scale<kWide>(x[3], m_hi, h_hi), b[2], b[3]);
    }
  }
}

template <bool kWide, int kStages>
__global__ void __launch_bounds__(kThreads, 1) decode_kernel(const DecodeArgs a) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ uint64_t bars[kWarps][kStages];
  __shared__ float reduce[kWarps][4][32];                    // GEMM1 split-K partial tiles
  __shared__ __align__(16) uint16_t inter[kDecodeMaxTokens][kUnitFeatures];  // [row][feature] bf16
  __shared__ BlockRoute rt;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
  if (lane == 0)
    for (int s = 0; s < kStages; ++s) kernels::mbarrier_init(&bars[warp][s], 1);
  kernels::fence_barrier_init();
  // Programmatic dependent launch (docs/gpu-pipeline.md): the inputs may come from the previous
  // kernel; the combine may launch at once (it waits for this grid before reading anything).
  cudaGridDependencySynchronize();
  cudaTriggerProgrammaticLaunchCompletion();
  route_block(a, rt);
  const int pairs = a.tokens * a.top_k;
  if (blockIdx.x == 0) {  // the combine's routing tables
    if (tid < pairs) {
      a.pair_slot[tid] = rt.pair_slot[tid];
      a.pair_row[tid] = rt.pair_row[tid];
      a.pair_weight[tid] = rt.weights[tid];
    }
    if (tid < rt.active) a.slot_expert[tid] = rt.slot_expert[tid];
    if (tid == 0) *a.active_count = rt.active;
  }
  const int S = a.inter_size / kUnitFeatures;
  const int64_t units = static_cast<int64_t>(rt.active) * S;
  const int64_t u0 = blockIdx.x * units / gridDim.x, u1 = (blockIdx.x + 1) * units / gridDim.x;
  if (u0 == u1) return;

  // This warp's pieces of every unit: GEMM1 chunks [c0, c1) of tile 4f + tile_in_unit, then GEMM2
  // tiles [t0, t1) of block f.
  const int tile_in_unit = warp / kSplitK, split = warp % kSplitK;
  const int c0 = a.chunks1 * split / kSplitK, c1 = a.chunks1 * (split + 1) / kSplitK;
  const int tiles2 = a.hidden_size / 16;
  const int t0 = tiles2 * warp / kWarps, t1 = tiles2 * (warp + 1) / kWarps;
  const int n1 = (c1 - c0 + 1) / 2, n2 = (t1 - t0 + kStageRecords2 - 1) / kStageRecords2, n = n1 + n2;
  const uint32_t items = static_cast<uint32_t>(n * (u1 - u0));
  const int chunks = a.chunks1;
  uint8_t* ring = smem + act_bytes(chunks, a.tokens) + warp * kStages * kStageBytes;
  auto issue = [&](uint32_t i) {  // lane 0: piece i of this warp's sequence into ring slot i % kStages
    const int u = static_cast<int>(u0) + static_cast<int>(i) / n;
    const int j = static_cast<int>(i) % n;
    const int slot = u / S, f = u % S;
    const int64_t expert = rt.slot_expert[slot];
    const uint8_t* src;
    uint32_t bytes;
    if (j < n1) {
      const int c = c0 + 2 * j;
      src = a.w1 + expert * a.w1_stride + (static_cast<int64_t>(kUnitTiles * f + tile_in_unit) * chunks + c) * kChunkBytes;
      bytes = min(2, c1 - c) * kChunkBytes;
    } else {
      const int t = t0 + kStageRecords2 * (j - n1);
      src = a.w2 + expert * a.w2_stride + (static_cast<int64_t>(f) * tiles2 + t) * kSliceRecordBytes;
      bytes = min(kStageRecords2, t1 - t) * kSliceRecordBytes;
    }
    uint64_t* bar = &bars[warp][i % kStages];
    kernels::mbarrier_arrive_expect_tx(bar, bytes);
    kernels::bulk_copy_to_shared(ring + (i % kStages) * kStageBytes, src, bytes, bar);
  };
  if (lane == 0)
    for (uint32_t i = 0; i < min(static_cast<uint32_t>(kStages), items); ++i) issue(i);

  // The T token rows, staged once for every expert (an expert's MMA column n reads its row n's token).
  const int stride = act_row_stride(chunks);
  for (int t = 0; t < a.tokens; ++t)
    stage_act_row<false>(a.hidden + static_cast<int64_t>(t) * a.hidden_size, a.hidden_size, chunks, smem + t * stride,
                         tid, kThreads);
  __syncthreads();

  float acc2[kMaxTiles2][4];
#pragma unroll
  for (int t = 0; t < kMaxTiles2; ++t)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc2[t][j] = 0.f;
  const int first_slot = static_cast<int>(u0 / S);
  int cur_slot = first_slot;
  // GEMM2 partial sums of slot `slot` to the workspace: rows t0*16.. of the block's slice.
  auto flush = [&](int slot) {
    const int rows = rt.slot_rows[slot];
    float* p = a.partials + (static_cast<int64_t>(blockIdx.x) * a.max_segments + (slot - first_slot)) * a.tokens *
                                a.hidden_size;
#pragma unroll
    for (int t = 0; t < kMaxTiles2; ++t) {
      if (t < t1 - t0) {
        const int row = (t0 + t) * 16 + g;
#pragma unroll
        for (int j = 0; j < 2; ++j)
          if (2 * q + j < rows) {
            p[(2 * q + j) * a.hidden_size + row] = acc2[t][j];
            p[(2 * q + j) * a.hidden_size + row + 8] = acc2[t][2 + j];
          }
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) acc2[t][j] = 0.f;
    }
  };

  uint32_t item = 0;
  auto wait_piece = [&]() -> const uint8_t* {
    kernels::mbarrier_wait_parity(&bars[warp][item % kStages], (item / kStages) & 1u);
    return ring + (item % kStages) * kStageBytes;
  };
  auto release_piece = [&]() {
    __syncwarp();  // every lane has read the stage before it is refilled
    if (lane == 0 && item + kStages < items) issue(item + kStages);
    ++item;
  };
  for (int64_t u = u0; u < u1; ++u) {
    const int slot = static_cast<int>(u / S), f = static_cast<int>(u % S);
    if (slot != cur_slot) {
      flush(cur_slot);
      cur_slot = slot;
    }
    const int64_t expert = rt.slot_expert[slot];
    const int rows = rt.slot_rows[slot];
    // GEMM1: lanes whose MMA column is past the expert's rows read its last row (never stored).
    const uint32_t b_base[1] = {kernels::shared_address(smem + rt.slot_tokens[slot][min(g, rows - 1)] * stride + q * 16)};
    float chains[2][1][4] = {};
    for (int j = 0; j < n1; ++j) {
      const uint8_t* stage = wait_piece();
      const int c = c0 + 2 * j;
#pragma unroll
      for (int x = 0; x < 2; ++x)
        if (c + x < c1)
          mma_chunk<kWide, 1>(load_chunk_words(kernels::shared_address(stage + x * kChunkBytes), lane), b_base,
                              (c + x) * kChunkK * 2, chains);
      release_piece();
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) reduce[warp][j][lane] = chains[0][0][j] + chains[1][0][j];
    __syncthreads();
    // Split-K sum in a fixed order, bias, SwiGLU: thread -> (tile t4, feature gg, row col).
    if (tid < kUnitTiles * 8 * kDecodeMaxTokens) {
      const int t4 = tid >> 6, gg = (tid >> 3) & 7, col = tid & 7;
      const int ln = gg * 4 + (col >> 1), jj = col & 1;
      float gate = 0.f, linear = 0.f;
#pragma unroll
      for (int s = 0; s < kSplitK; ++s) {
        gate += reduce[t4 * kSplitK + s][jj][ln];
        linear += reduce[t4 * kSplitK + s][2 + jj][ln];
      }
      const int feature = f * kUnitFeatures + t4 * 8 + gg;
      if (a.b1) {
        const uint16_t* b = a.b1 + expert * 2 * a.inter_size + 2 * feature;
        gate += __bfloat162float(__ushort_as_bfloat16(b[0]));
        linear += __bfloat162float(__ushort_as_bfloat16(b[1]));
      }
      inter[col][t4 * 8 + gg] = __bfloat16_as_ushort(__float2bfloat16_rn(swiglu(gate, linear, a.alpha, a.limit)));
    }
    __syncthreads();
    // GEMM2 B fragments (mma_bf16.cuh): column g = the expert's row g, K = the 32 features.
    const uint32_t* iw = reinterpret_cast<const uint32_t*>(&inter[g][0]);
    const uint32_t b[4] = {iw[q], iw[q + 4], iw[q + 8], iw[q + 12]};
    for (int j = 0; j < n2; ++j) {
      const uint8_t* stage = wait_piece();
      if (j == 0)
        gemm2_stage<kWide, 0>(stage, t1 - t0, lane, b, acc2);
      else
        gemm2_stage<kWide, kStageRecords2>(stage, t1 - t0 - kStageRecords2, lane, b, acc2);
      release_piece();
    }
  }
  flush(cur_slot);
}

// out[t, h] = bf16( sum over the token's slots j and the blocks b whose runs cover slot j's expert:
// weight_j * partial[b, j] + sum over j of weight_j * bias_j ). One block per (token, 32 columns);
// warp w adds the (j, b) items w, w + 8, ... (the partial sums live in L2: many loads in flight per
// output beat one long chain), then warp 0 adds the eight warp sums in order. A fixed assignment and
// order, so bitwise reproducible.
constexpr int kCombineWarps = 8;
__global__ void __launch_bounds__(kCombineWarps * 32) decode_combine_kernel(const DecodeArgs a) {
  __shared__ float sums[kCombineWarps][32];
  cudaGridDependencySynchronize();
  cudaTriggerProgrammaticLaunchCompletion();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int t = blockIdx.y;
  const int h = blockIdx.x * 32 + lane;
  const int S = a.inter_size / kUnitFeatures;
  const int units = *a.active_count * S, grid = a.grid;
  float acc = 0.f;
  int base = 0;  // items before slot j's
  for (int j = 0; j < a.top_k; ++j) {
    const int p = t * a.top_k + j;
    const int slot = a.pair_slot[p], row = a.pair_row[p];
    const float weight = a.pair_weight[p];
    if (warp == 0 && a.b2)
      acc += weight * __bfloat162float(__ushort_as_bfloat16(a.b2[static_cast<int64_t>(a.slot_expert[slot]) * a.hidden_size + h]));
    // Blocks whose runs [b*U/G, (b+1)*U/G) meet the slot's units [slot*S, (slot+1)*S).
    const int first = slot * S, last = first + S - 1;
    const int b_lo = ((first + 1) * grid - 1) / units, b_hi = ((last + 1) * grid - 1) / units;
#pragma unroll 4
    for (int blk = b_lo + ((warp - base) % kCombineWarps + kCombineWarps) % kCombineWarps; blk <= b_hi;
         blk += kCombineWarps) {
      const int bu0 = blk * units / grid, bu1 = (blk + 1) * units / grid;
      if (bu0 == bu1) continue;  // a block with no units wrote nothing
      const int64_t seg = slot - bu0 / S;
      acc += weight * a.partials[((blk * static_cast<int64_t>(a.max_segments) + seg) * a.tokens + row) * a.hidden_size + h];
    }
    base += b_hi - b_lo + 1;
  }
  sums[warp][lane] = acc;
  __syncthreads();
  if (warp != 0) return;
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < kCombineWarps; ++w) total += sums[w][lane];
  a.out[static_cast<int64_t>(t) * a.hidden_size + h] = __bfloat16_as_ushort(__float2bfloat16_rn(total));
}

size_t dynamic_smem(int hidden, int tokens, int stages) {
  const int chunks = (hidden / 32 + kChunkBlocks - 1) / kChunkBlocks;
  return static_cast<size_t>(act_bytes(chunks, tokens)) + static_cast<size_t>(kWarps) * stages * kStageBytes;
}

template <class F>
void for_each_decode_variant(F&& f) {
  f(decode_kernel<false, 2>);
  f(decode_kernel<true, 2>);
  f(decode_kernel<false, 4>);
  f(decode_kernel<true, 4>);
}

}  // namespace

bool decode_supported(int hidden, int intermediate, int tokens, int stages, size_t smem_per_block_optin) {
  if (hidden % 32 != 0 || intermediate % 32 != 0 || hidden <= 0 || intermediate <= 0) return false;
  if (hidden / 16 > kWarps * kMaxTiles2 || tokens > kDecodeMaxTokens || (stages != 2 && stages != 4)) return false;
  size_t static_smem = 0;
  for_each_decode_variant([&](auto kernel) {
    cudaFuncAttributes attr{};
    MXMOE_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
    static_smem = std::max(static_smem, attr.sharedSizeBytes);
  });
  return dynamic_smem(hidden, tokens, stages) + static_smem <= smem_per_block_optin;
}

int decode_grid(int sm_count) { return sm_count; }

int decode_max_segments(int experts, int top_k, int intermediate, int64_t tokens, int grid) {
  const int64_t s = intermediate / kUnitFeatures;
  const int64_t units = std::min<int64_t>(experts, tokens * top_k) * s;
  const int64_t per_block = (units + grid - 1) / grid;
  return static_cast<int>((per_block + s - 1) / s + 1);
}

size_t decode_partial_floats(int experts, int top_k, int hidden, int intermediate, int64_t tokens, int grid) {
  return static_cast<size_t>(grid) * decode_max_segments(experts, top_k, intermediate, tokens, grid) *
         static_cast<size_t>(tokens) * static_cast<size_t>(hidden);
}

void configure_decode(size_t smem_per_block_optin) {
  for_each_decode_variant([&](auto kernel) {
    cudaFuncAttributes attr{};
    MXMOE_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
    MXMOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem_per_block_optin - attr.sharedSizeBytes)));
  });
}

void launch_decode(const DecodeArgs& a, int stages, cudaStream_t stream) {
  if (a.tokens == 0) return;
  const size_t smem = dynamic_smem(a.hidden_size, a.tokens, a.stages);
  auto go = [&](auto kernel) { kernels::launch_with_pdl(kernel, dim3(a.grid), dim3(kThreads), smem, stream, a); };
  if (a.stages == 4)
    a.wide_scales ? go(decode_kernel<true, 4>) : go(decode_kernel<false, 4>);
  else
    a.wide_scales ? go(decode_kernel<true, 2>) : go(decode_kernel<false, 2>);
  if (stages < 2) return;
  const dim3 grid(static_cast<unsigned>(a.hidden_size / 32), static_cast<unsigned>(a.tokens));
  kernels::launch_with_pdl(decode_combine_kernel, grid, dim3(kCombineWarps * 32), 0, stream, a);
}

}  // namespace mxmoe::gemv
