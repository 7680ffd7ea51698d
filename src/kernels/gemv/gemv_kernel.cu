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

#include "kernels/common/bulk_copy.cuh"
#include "kernels/common/gpu_atomics.cuh"
#include "common/pdl_launch.cuh"
#include "kernels/common/static_smem.hpp"
#include "kernels/gemv/gemv.hpp"
#include "kernels/tile_table.hpp"
#include "kernels/gemv/cluster_combine.cuh"
#include "kernels/gemv/gemv_block.cuh"
#include "layout/gemv_layout.hpp"
#include "common/cuda_check.hpp"

namespace mxmoe::gemv {
namespace {

// Ring stages per warp, a template parameter (each count is its own kernel): 2 by default
// (kDefaultStages), 3 when forced where it fits.
constexpr int kMaxStages = 3;
constexpr int kMinStages = kDefaultStages;

// kCluster (GEMM2 routed locally with the combine, T * k <= kClusterSlots): the grid's expert slots of a
// column group form one thread-block cluster, and the combine runs in the cluster's rank 0 from the
// rows the others store into its shared memory (cluster_combine.cuh) instead of through L2 and a count.
template <bool kGemm1, bool kWideScales, int kStages, int kNb, bool kCluster = false>
__global__ void __launch_bounds__(32 * warps_for(kNb), min_blocks_for(kNb))
    gemv_kernel(const GemvArgs a, const int ksplit, const int rows_cap) {
  static_assert(!kCluster || (!kGemm1 && kNb == 1), "the cluster combine is GEMM2's, in 8-row batches");
  constexpr int kWarps = warps_for(kNb), kThreads = kWarps * 32, kBatchRows = kNarrowRows * kNb;
  extern __shared__ __align__(128) uint8_t smem[];
  // Split-K partial sums, reduced in a fixed order (the 16-row batch never splits K).
  __shared__ float partial[kNb == 1 ? kWarps : 1][4][32];
  __shared__ uint64_t bars[kWarps][kStages];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0)
    for (int s = 0; s < kStages; ++s) kernels::mbarrier_init(&bars[warp][s], WeightRing<kStages>::kArrivals);
  kernels::fence_barrier_init();
  if constexpr (kCluster) cluster_arrive_relaxed();  // phase 1 of the cluster barrier (cluster_combine.cuh)
  __syncwarp();
  // Programmatic dependent launch (docs/gpu-pipeline.md). Every kernel triggers its dependant only
  // after its own pdl_wait, so when GEMM2 starts, GEMM1 is running and the
  // routing that GEMM1 waited for is complete: GEMM2 may read the routing and request its first
  // weight stages before waiting for GEMM1's output. GEMM1 starts while the route kernel runs and
  // waits for it before reading its results. Given the logits (T <= kMaxLocalRouteTokens), there is no
  // route kernel: every block of both GEMMs routes the tokens itself, before it waits for anything.
  __shared__ LocalRouting local_route;
  __shared__ bool last_of_group;
  const bool local = a.local_route;
  const int slot = blockIdx.y;
  bool active;
  int expert, row0, rows;
  if (local) {
    local_routing(a, local_route);
    active = slot < local_route.active;
    expert = active ? local_route.slot_expert[slot] : 0;
    row0 = active ? local_route.slot_row0[slot] : 0;
    rows = active ? local_route.slot_rows[slot] : 0;
  } else {
    if constexpr (kGemm1) kernels::pdl_wait();
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
  ring.init(smem + act_bytes(a.chunks, rows_cap) + warp * warp_ring_bytes(kStages), bars[warp]);
  ring.retarget(a, a.weights + expert * a.expert_stride + static_cast<int64_t>(tile) * a.chunks * kChunkBytes, split,
                ksplit);
  const int groups = has_tile ? ring.groups() : 0;
  // The weights do not depend on the activations: request the first stages of the first batch now.
  const int first_batch = blockIdx.z * kBatchRows;
  const bool has_batch = first_batch < rows;
  if (ring.issuer(lane) && has_batch) ring.issue_first(groups);
  // The epilogue's bias is a weight too: its load's latency passes under the wait and the main loop.
  const float2 bias = has_tile && split == 0 && active
                          ? (kGemm1 ? gemm1_bias(a, tile, expert) : gemm2_bias(a, tile, expert))
                          : make_float2(0.f, 0.f);
  // Batch rows [batch, batch + kBatchRows) of the expert into shared memory.
  const auto stage_batch = [&](int batch) {
    stage_rows<kGemm1, kThreads, kNb == 1 ? 2 : 4>(a, row0 + batch, min(kBatchRows, rows - batch),
                                                    local ? local_route.row_pair + row0 + batch : nullptr, smem);
  };
  // Routed locally, GEMM1 stages its first batch's token rows before the wait too: the hidden states
  // are complete when the forward is enqueued (docs/gpu-pipeline.md), like the logits.
  const bool staged_early = kGemm1 && local && has_batch;
  if (staged_early) stage_batch(first_batch);
  // Counted, GEMM2 waits for its slot's GEMM1 blocks below instead of GEMM1's whole grid. It launches
  // only once every GEMM1 block is resident or done, so its waiting blocks cannot starve them.
  const bool counted = !kGemm1 && !local && a.slot_done != nullptr;
  const bool chain_block = blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0;
  if ((!kGemm1 || local) && !counted) kernels::pdl_wait();
  kernels::pdl_trigger();
  // The previous forward's GEMM2 is complete (the wait above), and this forward's GEMM2 reads the
  // counters only after its own wait for this grid: clear them here.
  if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0) {
    if (kGemm1)
      for (int i = threadIdx.x; i < a.combine_counter_count; i += kThreads) a.combine_counters[i] = 0;
    // Routed locally, but a combine kernel follows: it needs each pair's row.
    if (!kGemm1 && local && a.combine_out == nullptr && threadIdx.x < a.tokens * a.top_k)
      a.pair_row_out[threadIdx.x] = local_route.pair_row[threadIdx.x];
  }
  if (!active) {
    if (counted && chain_block) kernels::pdl_wait();  // see the end of the kernel
    // Slot 0 idle: no pair is live (every one dropped), so no block would combine; slot 0's blocks write
    // the zero rows of their columns (combine_columns skips every dropped pair).
    if (!kGemm1 && slot == 0 && blockIdx.z == 0 && a.combine_out != nullptr) {
      const int cols = tiles_per_block * kTileRows;
      combine_columns<kThreads>(a, local ? &local_route : nullptr, static_cast<int>(blockIdx.x) * cols, cols);
    }
    return;
  }
  if (counted) kernels::block_wait_count(&a.slot_done[slot], a.gemm1_blocks_per_slot);
  for (int batch = first_batch; batch < rows; batch += gridDim.z * kBatchRows) {
    const int batch_rows = min(kBatchRows, rows - batch);
    // Lanes whose batch row is past the batch's rows read its last row: their MMA column is never
    // stored, and a quarter-warp reading fewer distinct rows needs fewer shared-memory wavefronts (one
    // row: a broadcast), which is most batches below 2 rows per expert.
    uint32_t b_rows[kNb];
#pragma unroll
    for (int n = 0; n < kNb; ++n)
      b_rows[n] = kernels::shared_address(smem + min(kNarrowRows * n + g, batch_rows - 1) * stride + q * 16);
    // Later batches re-stream the tile: request their first stages before staging the rows.
    if (ring.issuer(lane) && batch != first_batch) ring.issue_first(groups);
    if (!staged_early || batch != first_batch) stage_batch(batch);
    __syncthreads();
    float chains[2][kNb][4] = {};
    consume_ring<kWideScales>(ring, groups, b_rows, chains);
    float acc[kNb][4];
    sum_chains<kNb, kWarps>(chains, acc, ksplit, partial);
    if constexpr (kCluster) {
      // Every row of a slot is in its first batch (T * k <= kClusterSlots rows in all). Phase 1 of the
      // cluster barrier first: rank 0 has started, its shared memory may be written.
      cluster_wait_acquire();
      if (has_tile && split == 0)
        store_rows_to_rank0(a, acc, tile - static_cast<int>(blockIdx.x) * tiles_per_block, bias, row0, batch_rows,
                            [&](int r) { return local_route.weights[local_route.row_pair[row0 + r]]; });
      break;
    }
    if (has_tile && split == 0) {
      const int64_t first_row = row0 + batch;
      if constexpr (kGemm1) {
        store_gemm1(a, acc, tile, bias, first_row, batch_rows);
      } else {
        store_gemm2(a, acc, tile, bias, first_row, batch_rows, [&](int r) {
          const int64_t row = first_row + r;
          return local ? local_route.weights[local_route.row_pair[row]] : a.pair_weights[a.row_pair[row]];
        });
      }
    }
    __syncthreads();  // the staged rows and partial sums are reused by the next batch
  }
  if constexpr (kGemm1) {
    // The block's stores are behind the loop's last barrier: one release count for the slot.
    if (a.slot_done != nullptr && threadIdx.x == 0) kernels::release_add_gpu(&a.slot_done[slot], 1);
  } else {
    // Counted, GEMM2 did not wait for GEMM1's grid: one block does before it exits, so that this grid
    // completes after GEMM1's and the next kernel's wait covers both (docs/gpu-pipeline.md).
    if (counted && chain_block) kernels::pdl_wait();
    if constexpr (kCluster) {
      cluster_combine<kThreads>(a, local_route, static_cast<int>(blockIdx.x) * tiles_per_block * kTileRows,
                      tiles_per_block * kTileRows);
      return;
    }
    if (a.combine_out == nullptr) return;
    // Every active block of the column group arrives once, after all its rows are written: the
    // barrier orders the block's stores before thread 0's count, a release; the count of the last to
    // arrive is also an acquire, and the barrier after it orders its threads' reads of the group's rows.
    __syncthreads();
    if (threadIdx.x == 0) {
      const int active_count = local ? local_route.active : *a.active_count;
      last_of_group = kernels::fetch_add_acq_rel_gpu(&a.combine_counters[blockIdx.x], 1) ==
                      active_count * static_cast<int>(gridDim.z) - 1;
    }
    __syncthreads();
    if (!last_of_group) return;
    const int cols = tiles_per_block * kTileRows;
    combine_columns<kThreads>(a, local ? &local_route : nullptr, static_cast<int>(blockIdx.x) * cols, cols);
  }
}

int nb_of(int batch_rows) { return batch_rows / kNarrowRows; }

size_t smem_for(int k, int rows_cap, int stages, int nb) {
  const int chunks = (k / 32 + kChunkBlocks - 1) / kChunkBlocks;
  return static_cast<size_t>(act_bytes(chunks, rows_cap)) + warps_for(nb) * warp_ring_bytes(stages);
}

// The grid: x = tile groups of `ksplit`, y = expert slots, z = row-batch splits.
dim3 grid_of(const GemvArgs& a, int64_t tokens, int max_active, int ksplit) {
  const int tiles_per_block = warps_for(nb_of(a.batch_rows)) / ksplit;
  const int64_t pairs = tokens * a.top_k;
  const int64_t batches = (pairs + int64_t{a.batch_rows} * max_active - 1) / (int64_t{a.batch_rows} * max_active);
  return dim3((a.tiles + tiles_per_block - 1) / tiles_per_block, static_cast<unsigned>(max_active),
              static_cast<unsigned>(std::clamp<int64_t>(batches, 1, 64)));
}

// The plan's split-K (16-row batches never split K).
int ksplit_of(const GemvArgs& a) { return nb_of(a.batch_rows) == 1 ? a.ksplit : 1; }

template <bool kGemm1>
void launch(const GemvArgs& a, int64_t tokens, int max_active, cudaStream_t stream) {
  if (tokens == 0 || max_active == 0) return;
  MXMOE_REQUIRE(batch_rows_built(a.batch_rows), "gemv: batch_rows ", a.batch_rows, " is not built in this profile");
  MXMOE_REQUIRE(a.batch_rows == kNarrowRows || a.stages == kMinStages, "gemv: 16-row batches run with ",
                kMinStages, " ring stages only, got ", a.stages);
  const int nb = nb_of(a.batch_rows);
  MXMOE_REQUIRE(a.ksplit == 1 || a.ksplit == 2 || a.ksplit == 4 || a.ksplit == 8, "gemv: ksplit must be 1, 2, 4 or 8, got ",
                a.ksplit);
  const int ksplit = ksplit_of(a);
  // An expert has at most `tokens` rows (top-k experts are distinct), so smaller batches need less
  // shared memory for the staged rows, and more blocks fit per SM.
  const int rows_cap = static_cast<int>(std::min<int64_t>(a.batch_rows, tokens));
  const dim3 grid = grid_of(a, tokens, max_active, ksplit);
  const size_t smem = smem_for(a.k, rows_cap, a.stages, nb);
  const dim3 block(32 * warps_for(nb));
  auto go = [&](auto kernel) { kernels::launch_with_pdl(kernel, grid, block, smem, stream, a, ksplit, rows_cap); };
  if (!kGemm1 && a.cluster_combine) {
    MXMOE_REQUIRE(cluster_combine_valid(a.batch_rows, a.stages, tokens, a.top_k, a.local_route, a.combine_out != nullptr),
                  "gemv: the cluster combine needs local routing, the combine in GEMM2, 8-row batches, the default ",
                  "ring and at most ", kClusterSlots, " rows");
    const dim3 cluster(1, grid.y, 1);
    auto go_cluster = [&](auto kernel) {
      kernels::launch_with_pdl_in_clusters(kernel, grid, block, smem, stream, cluster, a, ksplit, rows_cap);
    };
    a.wide_scales ? go_cluster(gemv_kernel<false, true, kMinStages, 1, true>)
                  : go_cluster(gemv_kernel<false, false, kMinStages, 1, true>);
    return;
  }
  // The tile table's GEMV row of these rows and ring stages (tile_table.hpp).
  bool launched = false;
  kernels::for_each_row<kernels::TileFamily::Gemv>([&](auto i) {
    constexpr const kernels::TileRow& row = kernels::kRowOf<decltype(i)>;
    constexpr int kNb = row.rows / kNarrowRows;
    if (launched || kNb != nb || row.stages != a.stages) return;
    launched = true;
    a.wide_scales ? go(gemv_kernel<kGemm1, true, row.stages, kNb>) : go(gemv_kernel<kGemm1, false, row.stages, kNb>);
  });
  MXMOE_REQUIRE(launched, "gemv: no tile of ", a.batch_rows, " rows and ", a.stages, " ring stages in this build");
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
// f(kernel) for each kernel of the tile table's GEMV rows that this build has: both GEMMs, both
// scale paths, and for the 8-row default ring the cluster-combine GEMM2 too.
template <class F>
void for_each_variant(F&& f) {
  kernels::for_each_row<kernels::TileFamily::Gemv>([&](auto i) {
    constexpr const kernels::TileRow& row = kernels::kRowOf<decltype(i)>;
    constexpr int kNb = row.rows / kNarrowRows;
    f(gemv_kernel<true, false, row.stages, kNb>);
    f(gemv_kernel<true, true, row.stages, kNb>);
    f(gemv_kernel<false, false, row.stages, kNb>);
    f(gemv_kernel<false, true, row.stages, kNb>);
    if constexpr (kNb == 1 && row.stages == kMinStages) {
      f(gemv_kernel<false, false, kMinStages, 1, true>);
      f(gemv_kernel<false, true, kMinStages, 1, true>);
    }
  });
}
// Each GEMV row is a kernel of this file: 8 or 16 rows, 2 or 3 ring stages (16 rows with 2 only).
static_assert(kernels::all_rows_of<kernels::TileFamily::Gemv>([](auto i) {
  constexpr const kernels::TileRow& row = kernels::kRowOf<decltype(i)>;
  return (row.rows == kNarrowRows && (row.stages == kMinStages || row.stages == kMaxStages)) ||
         (row.rows == 2 * kNarrowRows && row.stages == kMinStages);
}));
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

namespace {
// The launch's own copy of the arguments: T, and local routing when the logits or the ids are given.
GemvArgs for_tokens(const GemvArgs& args, int64_t tokens) {
  GemvArgs a = args;
  a.tokens = static_cast<int>(tokens);
  MXMOE_REQUIRE(a.logits == nullptr || a.topk_ids == nullptr, "gemv: local routing from logits or ids, not both");
  a.local_route = a.logits != nullptr || a.topk_ids != nullptr;
  MXMOE_REQUIRE(!a.local_route || tokens <= kMaxLocalRouteTokens, "gemv: local routing of T = ", tokens,
                " tokens; at most ", kMaxLocalRouteTokens);
  return a;
}
}  // namespace

void launch_gemm1(const GemvArgs& args, int64_t tokens, int max_active, cudaStream_t stream) {
  const GemvArgs a = for_tokens(args, tokens);
  MXMOE_REQUIRE(a.slot_done == nullptr || !a.local_route, "gemv: GEMM1 counts its blocks per slot only after the route kernel");
  launch<true>(a, tokens, max_active, stream);
}
void launch_gemm2(const GemvArgs& args, int64_t tokens, int max_active, cudaStream_t stream) {
  const GemvArgs a = for_tokens(args, tokens);
  MXMOE_REQUIRE(a.combine_out == nullptr || (tokens <= kFusedCombineTokens && a.combine_counters != nullptr &&
                                             (a.local_route || a.pair_row != nullptr)),
                "gemv: the combine in GEMM2 needs T <= ", kFusedCombineTokens, ", its counters and the pair rows");
  MXMOE_REQUIRE(!a.local_route || a.combine_out != nullptr || a.pair_row_out != nullptr,
                "gemv: GEMM2 routed locally must write the pair rows for the combine kernel");
  MXMOE_REQUIRE(a.slot_done == nullptr || (!a.local_route && a.combine_out == nullptr && a.gemm1_blocks_per_slot > 0),
                "gemv: GEMM2 counted per slot needs the route kernel, the combine kernel and GEMM1's blocks per slot");
  launch<false>(a, tokens, max_active, stream);
}

bool cluster_combine_valid(int batch_rows, int stages, int64_t tokens, int top_k, bool local_route, bool fused_combine) {
  return local_route && fused_combine && batch_rows == kNarrowRows && stages == kMinStages &&
         tokens * top_k <= kClusterSlots;
}

int blocks_per_slot(const GemvArgs& args, int64_t tokens, int max_active) {
  const dim3 grid = grid_of(args, tokens, max_active, ksplit_of(args));
  return static_cast<int>(grid.x * grid.z);
}

}  // namespace mxmoe::gemv
