// The resident decode kernel (resident.hpp) and the one-block kernel that clears its counters.
//
// Ordering (docs/gpu-pipeline.md): the clearing kernel triggers its dependant at once and then waits
// for its own predecessor before it clears; the resident kernel triggers at once too, routes the tokens,
// requests its GEMM2 units and streams all of its GEMM1 tiles before it waits (it reads only the
// forward's inputs and weights until then, and holds its GEMM1 sums in registers), then stores. Its
// blocks meet through a count across the grid, so all of them must be resident at once: the grid is one
// block per SM and the next kernel launches only once every block has triggered, i.e. has started.
#include <cuda_bf16.h>

#include <cstdint>

#include "common/cuda_check.hpp"
#include "common/pdl_launch.cuh"
#include "kernels/common/bulk_copy.cuh"
#include "kernels/common/gpu_atomics.cuh"
#include "kernels/common/static_smem.hpp"
#include "kernels/gemv/gemv_block.cuh"
#include "kernels/gemv/resident.hpp"
#include "kernels/gemv/resident_layout.hpp"

namespace mxmoe::gemv {
namespace {

constexpr int kThreads = kResidentWarps * 32;
constexpr int kStages = kDefaultStages;
constexpr int kPartialBytes = 4 * 32 * 4;  // one unit's sums: 4 accumulators per lane
static_assert(kResidentMaxRounds * kPartialBytes <= warp_ring_bytes(kStages), "GEMM1's sums fit the warp's ring");

// The launcher's layout (resident_layout) and the forward's buffers.
struct KernelArgs {
  int32_t* counters;  // [0]: blocks done with GEMM1; [1 + tile]: GEMM2 units done per column tile
  float* partials;    // GEMM2 unit u's sums: [u][rows_cap][16] fp32
  uint16_t* out;      // bf16 [T, H]
  int ring_offset, resident_offset, unit_stride, stage2_bytes, rows_cap;
  int ksplit1, ksplit2;
  bool gemm2;         // false: stop after GEMM1's stores (bench --stages)
};

__global__ void clear_counters_kernel(int32_t* counters, int count) {
  cudaTriggerProgrammaticLaunchCompletion();
  cudaGridDependencySynchronize();  // the previous forward's kernels are done with them
  for (int i = threadIdx.x; i < count; i += blockDim.x) counters[i] = 0;
}

// The tile records of GEMM unit (slot, tile) of an expert slot.
__device__ __forceinline__ const uint8_t* tile_records(const GemvArgs& a, const LocalRouting& route, int slot, int tile) {
  return a.weights + route.slot_expert[slot] * a.expert_stride + static_cast<int64_t>(tile) * a.chunks * kChunkBytes;
}

// Chunk `split`'s first chunk of `ksplit` (WeightRing::retarget's split).
__device__ __forceinline__ int split_begin(int chunks, int split, int ksplit) { return chunks * split / ksplit; }

// The sums of each token's k pairs over GEMM2 column tile `tile`, from the units' partials: per pair the
// splits in order, the bias, times the routing weight; the pairs in slot order (the GEMV kernels' sums:
// sum_chains, for_each_gemm2_output, combine_columns). One warp: lane (token lane / 16, column lane % 16),
// every partial requested before any is added (one L2 round trip; k * ksplit2 <= kResidentMaxPartials).
__device__ void combine_tile(const GemvArgs& a, const KernelArgs& k, const LocalRouting& route, int tile) {
  const int lane = threadIdx.x & 31, t = lane >> 4;
  const int col = tile * kTileRows + (lane & 15);
  if (t >= a.tokens) return;
  // Entry i: pair s = i / ksplit2 of token t, split i % ksplit2; its last split also carries the bias.
  float v[kResidentMaxPartials], bias[kResidentMaxPartials];
#pragma unroll
  for (int i = 0; i < kResidentMaxPartials; ++i) {
    const int s = i / k.ksplit2, split = i % k.ksplit2, p = t * a.top_k + s;
    v[i] = bias[i] = 0.f;
    if (s < a.top_k && route.pair_row[p] >= 0) {
      int slot = 0;
      while (route.slot_expert[slot] != route.ids[p]) ++slot;
      const int64_t unit = static_cast<int64_t>(slot * a.tiles + tile) * k.ksplit2 + split;
      // other blocks' sums: at L2, past any stale L1 line
      v[i] = __ldcg(k.partials + (unit * k.rows_cap + route.pair_row[p] - route.slot_row0[slot]) * kTileRows + (lane & 15));
      if (a.bias && split == k.ksplit2 - 1)
        bias[i] = __bfloat162float(__ushort_as_bfloat16(a.bias[static_cast<int64_t>(route.ids[p]) * a.n + col]));
    }
  }
  float acc = 0.f, y = 0.f;
#pragma unroll
  for (int i = 0; i < kResidentMaxPartials; ++i) {
    const int s = i / k.ksplit2, split = i % k.ksplit2, p = t * a.top_k + s;
    if (s >= a.top_k || route.pair_row[p] < 0) continue;  // past the pairs, or a dropped pair
    y = split == 0 ? v[i] : y + v[i];
    if (split < k.ksplit2 - 1) continue;
    if (a.bias) y += bias[i];
    acc = __fadd_rn(acc, __fmul_rn(y, route.weights[p]));  // not fused: the GEMV kernels store y * w first
  }
  if (col < a.n) k.out[static_cast<int64_t>(t) * a.n + col] = __bfloat16_as_ushort(__float2bfloat16_rn(acc));
}

template <bool kWide1, bool kWide2>
__global__ void __launch_bounds__(kThreads, 1) resident_kernel(const GemvArgs a1, const GemvArgs a2, const KernelArgs k) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ uint64_t bars[kResidentWarps][kStages];
  __shared__ uint64_t resident_bar;
  __shared__ LocalRouting route;
  __shared__ int token_pair[kMaxLocalRouteTokens];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
  const int blocks = static_cast<int>(gridDim.x), b = static_cast<int>(blockIdx.x);
  cudaTriggerProgrammaticLaunchCompletion();  // this block is resident (see the top of the file)
  if (lane == 0)
    for (int s = 0; s < kStages; ++s) kernels::mbarrier_init(&bars[warp][s], 1);
  if (threadIdx.x == 0) kernels::mbarrier_init(&resident_bar, 1);
  if (threadIdx.x < a1.tokens) token_pair[threadIdx.x] = static_cast<int>(threadIdx.x) * a1.top_k;
  kernels::fence_barrier_init();
  local_routing(a1, route);  // ends with a block barrier
  const int active = route.active;
  if (active == 0) {  // every pair dropped: zero rows
    cudaGridDependencySynchronize();
    for (int64_t i = int64_t{b} * kThreads + threadIdx.x; i < int64_t{a2.tokens} * a2.n; i += int64_t{blocks} * kThreads)
      k.out[i] = 0;
    return;
  }

  // GEMM2's units of this block: u = (slot * tiles + tile) * ksplit2 + split, requested whole into shared memory.
  const int64_t n2 = int64_t{active} * a2.tiles * k.ksplit2;
  const int u2_begin = static_cast<int>(n2 * b / blocks), u2_end = static_cast<int>(n2 * (b + 1) / blocks);
  const uint32_t resident = kernels::shared_address(smem + k.resident_offset);
  const auto unit2 = [&](int u, int& slot, int& tile, int& split) {
    split = u % k.ksplit2;
    tile = (u / k.ksplit2) % a2.tiles;
    slot = u / k.ksplit2 / a2.tiles;
  };
  const auto unit2_bytes = [&](int split) {
    const int cb = split_begin(a2.chunks, split, k.ksplit2), ce = split_begin(a2.chunks, split + 1, k.ksplit2);
    if (ce == cb) return 0u;  // more splits than chunks
    return static_cast<uint32_t>((ce - cb) * kChunkBytes - (ce == a2.chunks ? tail_cut_bytes(a2.k / 32) : 0));
  };

  // GEMM1's tiles of this block: items (slot * tiles + tile), each split ksplit1 ways; unit j = item j / ksplit1's
  // split j % ksplit1 runs on warp j % 16 in round j / 16 (a round's units of one item sit in one round).
  const int64_t n1 = int64_t{active} * a1.tiles;
  const int i1_begin = static_cast<int>(n1 * b / blocks), i1_end = static_cast<int>(n1 * (b + 1) / blocks);
  const int units1 = (i1_end - i1_begin) * k.ksplit1;
  WeightRing<kStages> ring;  // the consumer's view: the unit being summed
  ring.init(smem + k.ring_offset + warp * warp_ring_bytes(kStages), bars[warp]);
  const auto target1 = [&](WeightRing<kStages>& r, int j) {
    const int item = i1_begin + j / k.ksplit1;
    r.retarget(a1, tile_records(a1, route, item / a1.tiles, item % a1.tiles), j % k.ksplit1, k.ksplit1);
  };
  // Lane 0's producer view: the stages requested run on from one unit into the warp's next, so the ring
  // never drains between units.
  WeightRing<kStages> ahead = ring;
  int ahead_j = warp, ahead_grp = 0;
  const auto request_next = [&](int slot) {
    while (ahead_j < units1 && ahead_grp == ahead.groups()) {  // a split may have no chunks
      ahead_j += kResidentWarps;
      ahead_grp = 0;
      if (ahead_j < units1) target1(ahead, ahead_j);
    }
    if (ahead_j < units1) ahead.issue(slot, ahead_grp++);
  };
  if (warp < units1) target1(ahead, warp);
  if (lane == 0)
    for (int s = 0; s < kStages; ++s) request_next(s);
  if (threadIdx.x == 0 && u2_end > u2_begin) {
    uint32_t total = 0;
    for (int u = u2_begin; u < u2_end; ++u) total += unit2_bytes(u % k.ksplit2);
    const uint32_t bar = kernels::shared_address(&resident_bar);
    kernels::mbarrier_arrive_expect_tx(bar, total);
    for (int u = u2_begin; u < u2_end; ++u) {
      int slot, tile, split;
      unit2(u, slot, tile, split);
      const uint8_t* src = tile_records(a2, route, slot, tile) +
                           static_cast<int64_t>(split_begin(a2.chunks, split, k.ksplit2)) * kChunkBytes;
      if (unit2_bytes(split) > 0)
        kernels::bulk_copy_to_shared(resident + (u - u2_begin) * k.unit_stride, src, unit2_bytes(split), bar);
    }
  }
  // The tokens' rows, token t at row t (the forward's input: complete before the forward was enqueued).
  stage_rows<true, kThreads, 2>(a1, 0, a1.tokens, token_pair, smem);
  __syncthreads();

  // The epilogue's first item's bias (a weight): its load's latency passes under the main loop.
  float2 first_bias = make_float2(0.f, 0.f);
  if (warp < i1_end - i1_begin) {
    const int item = i1_begin + warp;
    first_bias = gemm1_bias(a1, item % a1.tiles, route.slot_expert[item / a1.tiles]);
  }

  // GEMM1: each unit's two chains summed, held in registers.
  const int stride1 = act_row_stride(a1.chunks);
  float keep[kResidentMaxRounds][4];
  int slot_of_ring = 0;
#pragma unroll
  for (int round = 0; round < kResidentMaxRounds; ++round) {
    const int j = warp + round * kResidentWarps;
    if (j < units1) {
      target1(ring, j);
      const int slot = (i1_begin + j / k.ksplit1) / a1.tiles;
      const int r = min(g, route.slot_rows[slot] - 1);  // lanes past the slot's rows: columns never stored
      const int token = route.row_pair[route.slot_row0[slot] + r] / a1.top_k;
      const uint32_t b_rows[1] = {kernels::shared_address(smem + token * stride1 + q * 16)};
      float chains[2][1][4] = {};
      uint32_t offset = ring.c_begin * (kChunkK * 2);
      const int groups = ring.groups();
      for (int grp = 0; grp < groups; ++grp) {
        kernels::mbarrier_wait_parity(ring.bars + slot_of_ring * 8, (ring.phases >> slot_of_ring) & 1u);
        ring.phases ^= 1u << slot_of_ring;
        const uint32_t stage = ring.slots + slot_of_ring * kStageBytes;
        const int in_stage = min(kStageChunks, ring.chunks - grp * kStageChunks);
#pragma unroll
        for (int u = 0; u < kStageChunks; ++u) {
          if (u > 0 && u >= in_stage) break;
          mma_chunk<kWide1>(load_chunk_words(stage + u * kChunkBytes, lane), b_rows, offset, chains);
          offset += kChunkK * 2;
        }
        __syncwarp();  // every lane has read the stage before it is refilled
        if (lane == 0) request_next(slot_of_ring);
        slot_of_ring = slot_of_ring + 1 == kStages ? 0 : slot_of_ring + 1;
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) keep[round][i] = chains[0][0][i] + chains[1][0][i];
    }
  }

  // The previous kernel is complete: this block may store. The sums go to the warp's drained ring, and
  // each item's splits are added in split order there (sum_chains), then the SwiGLU epilogue.
  cudaGridDependencySynchronize();
  float* own = reinterpret_cast<float*>(smem + k.ring_offset + warp * warp_ring_bytes(kStages));
#pragma unroll
  for (int round = 0; round < kResidentMaxRounds; ++round)
    if (warp + round * kResidentWarps < units1)
#pragma unroll
      for (int i = 0; i < 4; ++i) own[(round * 4 + i) * 32 + lane] = keep[round][i];
  __syncthreads();
  for (int i = warp; i < i1_end - i1_begin; i += kResidentWarps) {
    const int item = i1_begin + i, slot = item / a1.tiles, tile = item % a1.tiles;
    float acc[1][4];
    for (int s = 0; s < k.ksplit1; ++s) {
      const int j = i * k.ksplit1 + s;
      const float* sums = reinterpret_cast<const float*>(smem + k.ring_offset +
                                                         (j % kResidentWarps) * warp_ring_bytes(kStages)) +
                          (j / kResidentWarps) * 4 * 32;
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[0][c] = s == 0 ? sums[c * 32 + lane] : acc[0][c] + sums[c * 32 + lane];
    }
    const float2 bias = i == warp ? first_bias : gemm1_bias(a1, tile, route.slot_expert[slot]);
    store_gemm1<1>(a1, acc, tile, bias, route.slot_row0[slot], route.slot_rows[slot]);
  }
  // The block's stores are behind the barrier: one release count; then every block's rows are stored.
  __syncthreads();
  if (threadIdx.x == 0) kernels::release_add_gpu(&k.counters[0], 1);
  kernels::block_wait_count(&k.counters[0], blocks);

  // GEMM2 from shared memory: the (at most two) slots' intermediate rows staged where the rings were.
  if (u2_end == u2_begin || !k.gemm2) return;
  int first_slot, last_slot, tile, split;
  unit2(u2_begin, first_slot, tile, split);
  unit2(u2_end - 1, last_slot, tile, split);
  for (int s = first_slot; s <= last_slot; ++s)
    stage_rows<false, kThreads, 2>(a2, route.slot_row0[s], route.slot_rows[s], nullptr,
                                   smem + k.ring_offset + (s - first_slot) * k.stage2_bytes);
  __syncthreads();
  kernels::mbarrier_wait_parity(kernels::shared_address(&resident_bar), 0);
  const int stride2 = act_row_stride(a2.chunks);
  for (int j = warp; j < u2_end - u2_begin; j += kResidentWarps) {
    const int u = u2_begin + j;
    int slot;
    unit2(u, slot, tile, split);
    const int cb = split_begin(a2.chunks, split, k.ksplit2), ce = split_begin(a2.chunks, split + 1, k.ksplit2);
    const uint32_t b_rows[1] = {kernels::shared_address(smem + k.ring_offset + (slot - first_slot) * k.stage2_bytes +
                                                        min(g, k.rows_cap - 1) * stride2 + q * 16)};
    float chains[2][1][4] = {};
    uint32_t offset = cb * (kChunkK * 2);
    const uint32_t records = resident + j * k.unit_stride;
    for (int c = 0; c < ce - cb; ++c) {
      mma_chunk<kWide2>(load_chunk_words(records + c * kChunkBytes, lane), b_rows, offset, chains);
      offset += kChunkK * 2;
    }
    float* part = k.partials + static_cast<int64_t>(u) * k.rows_cap * kTileRows;
    float acc[1][4];
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[0][i] = chains[0][0][i] + chains[1][0][i];
    for_each_batch_row<1>(route.slot_rows[slot], [&](int, int jj, int r) {
      part[r * kTileRows + g] = acc[0][jj];
      part[r * kTileRows + g + 8] = acc[0][2 + jj];
    });
  }
  // The block's stores are behind the barrier: one count per (slot, tile) the block holds units of, all at
  // once; the block that completes a column tile sums it (one warp per tile).
  __shared__ int last_tiles[kResidentMaxEntries];
  __shared__ int last_count;
  if (threadIdx.x == 0) last_count = 0;
  __syncthreads();
  const int first_entry = u2_begin / k.ksplit2, entries = (u2_end - 1) / k.ksplit2 - first_entry + 1;
  if (threadIdx.x < entries) {
    const int e = first_entry + static_cast<int>(threadIdx.x);
    const int units = min(u2_end, (e + 1) * k.ksplit2) - max(u2_begin, e * k.ksplit2);
    const int col_tile = e % a2.tiles;
    if (kernels::fetch_add_acq_rel_gpu(&k.counters[1 + col_tile], units) + units == active * k.ksplit2)
      last_tiles[atomicAdd(&last_count, 1)] = col_tile;
  }
  __syncthreads();
  for (int i = warp; i < last_count; i += kResidentWarps) combine_tile(a2, k, route, last_tiles[i]);
}

template <class F>
void for_each_variant(F&& f) {
  f(resident_kernel<false, false>);
  f(resident_kernel<false, true>);
  f(resident_kernel<true, false>);
  f(resident_kernel<true, true>);
}

}  // namespace

size_t resident_static_smem_bytes() {
  return kernels::max_static_smem([](auto f) { for_each_variant(f); });
}

void configure_resident(size_t smem_per_block_optin) {
  for_each_variant([&](auto kernel) {
    cudaFuncAttributes attr{};
    MXMOE_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
    MXMOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem_per_block_optin - attr.sharedSizeBytes)));
  });
}

void launch_resident(const GemvArgs& gemm1, const GemvArgs& gemm2, const ResidentArgs& r, int64_t tokens,
                     int max_active, cudaStream_t stream) {
  if (tokens == 0) return;
  MXMOE_REQUIRE(gemm1.logits != nullptr || gemm1.topk_ids != nullptr, "gemv: the resident kernel routes locally");
  MXMOE_REQUIRE(gemm1.batch_rows == kNarrowRows && gemm1.stages == kDefaultStages,
                "gemv: the resident kernel runs 8-row batches and the default ring");
  ResidentShape shape;
  shape.w1 = packed_shape(gemm1.n, gemm1.k / 32);
  shape.w2 = packed_shape(gemm2.n, gemm2.k / 32);
  shape.tokens = tokens;
  shape.slots = max_active;
  shape.blocks = r.blocks;
  shape.ksplit1 = gemm1.ksplit;
  shape.ksplit2 = gemm2.ksplit;
  shape.top_k = gemm2.top_k;
  const ResidentLayout l = resident_layout(shape);
  const char* misfit = resident_misfit(shape, SIZE_MAX, 0);
  MXMOE_REQUIRE(misfit == nullptr, "gemv: the resident kernel cannot run T = ", tokens, ": ", misfit);
  GemvArgs a1 = gemm1, a2 = gemm2;
  a1.tokens = a2.tokens = static_cast<int>(tokens);
  a1.local_route = a2.local_route = true;
  const KernelArgs k{r.counters, r.partials, r.out, static_cast<int>(l.ring_offset), static_cast<int>(l.resident_offset),
                     static_cast<int>(l.unit_stride), static_cast<int>(l.stage2_bytes), l.rows_cap,
                     gemm1.ksplit, gemm2.ksplit, r.gemm2};
  kernels::launch_with_pdl(clear_counters_kernel, dim3(1), dim3(256), 0, stream, r.counters,
                           resident_counters_needed(gemm2.n));
  auto go = [&](auto kernel) {
    // The blocks meet through a count: all of them must fit on the device at once (a plan for another
    // device's SM count must not hang this one).
    int device = 0, sms = 0, per_sm = 0;
    MXMOE_CUDA_CHECK(cudaGetDevice(&device));
    MXMOE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    MXMOE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, static_cast<size_t>(l.total)));
    MXMOE_REQUIRE(r.blocks <= sms * per_sm, "gemv: the resident kernel's ", r.blocks, " blocks do not fit this device at ",
                  "once (", sms, " SMs, ", per_sm, " per SM)");
    kernels::launch_with_pdl(kernel, dim3(r.blocks), dim3(kThreads), static_cast<size_t>(l.total), stream, a1, a2, k);
  };
  if (a1.wide_scales)
    a2.wide_scales ? go(resident_kernel<true, true>) : go(resident_kernel<true, false>);
  else
    a2.wide_scales ? go(resident_kernel<false, true>) : go(resident_kernel<false, false>);
}

}  // namespace mxmoe::gemv
