// The streamed decode kernel (stream.hpp): both GEMMs of the GEMV family and the combine in one
// launch, as a fixed list of block-sized work items. An item is what one block of the per-GEMM kernel
// does (gemv_kernel.cu): 8 warps on `tiles_per_item` 16-row tiles of one expert slot, each tile's K
// split over 8 / tiles_per_item warps, with the same staging, ring, chunk order, split-K sum and
// epilogue (gemv_block.cuh). What differs is what happens between items: a warp requests the next
// item's first weight stages as soon as its ring is drained, before the split-K sum, the epilogue and
// any wait of the next item, so the weight stream runs on through GEMM1's tail into GEMM2.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/common/bulk_copy.cuh"
#include "kernels/common/gpu_atomics.cuh"
#include "kernels/common/pdl_launch.cuh"
#include "kernels/gemv/gemv_block.cuh"
#include "kernels/gemv/gemv_layout.hpp"
#include "kernels/gemv/stream.hpp"
#include "moe/cuda_check.hpp"

namespace mxmoe::gemv {
namespace {

constexpr int kWarps = warps_for(1);
constexpr int kThreads = kWarps * 32;
constexpr int kBlocksPerSm = min_blocks_for(1);
static_assert(kMaxStreamSlots <= kLocalPairs, "a block's own routing must hold every slot the kernel serves");


// Clears the stream kernel's counters for one forward. Launched right before it with programmatic
// dependent launch, it lets the stream kernel start at once (to route and request weights) and then
// waits for the previous kernel (the previous forward may still count) before clearing; the stream
// kernel's own wait is for this grid's completion, so it covers both.
__global__ void stream_clear_kernel(int32_t* counters, int count) {
  cudaTriggerProgrammaticLaunchCompletion();
  cudaGridDependencySynchronize();
  for (int i = threadIdx.x; i < count; i += blockDim.x) counters[i] = 0;
}

// One work item as a warp sees it.
struct Item {
  bool gemm1;
  int slot, group;  // expert slot, group of tiles (GEMM2: also the combine's column group)
  int tile;         // this warp's tile (may be past the last)
  int ksplit, split;
};

__device__ __forceinline__ Item item_at(const StreamArgs& s, int index, int n1, int groups1, int groups2) {
  Item it;
  it.gemm1 = index < n1;
  const int local = it.gemm1 ? index : index - n1;
  const int groups = it.gemm1 ? groups1 : groups2;
  const int tiles_per_item = it.gemm1 ? s.tiles_per_item1 : s.tiles_per_item2;
  it.slot = local / groups;
  it.group = local - it.slot * groups;
  it.ksplit = kWarps / tiles_per_item;
  const int warp = threadIdx.x >> 5;
  it.tile = it.group * tiles_per_item + warp / it.ksplit;
  it.split = warp % it.ksplit;
  return it;
}

// Points the warp's ring at its share of the item and returns its stage groups (0: no tile).
template <int kStages>
__device__ __forceinline__ int aim_ring(WeightRing<kStages>& ring, const GemvArgs& a, const Item& it, int expert) {
  if (it.tile >= a.tiles) return 0;
  ring.retarget(a, a.weights + expert * a.expert_stride + static_cast<int64_t>(it.tile) * a.chunks * kChunkBytes,
                it.split, it.ksplit);
  return ring.groups();
}

template <bool kWide1, bool kWide2, int kStages>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) stream_kernel(const StreamArgs s, const int rows_cap) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ float partial[kWarps][4][32];
  __shared__ uint64_t bars[kWarps][kStages];
  __shared__ LocalRouting route;
  __shared__ bool last;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0)
    for (int i = 0; i < kStages; ++i) kernels::mbarrier_init(&bars[warp][i], 1);
  kernels::fence_barrier_init();
  __syncwarp();
  // Routing first (the logits are complete when the forward is enqueued: docs/gpu-pipeline.md), then
  // the first item's weights, and only then the wait for the previous kernel (whose counters, rows
  // and output this forward reuses).
  local_routing(s.g1, route);
  const int slots = route.active;
  const int groups1 = (s.g1.tiles + s.tiles_per_item1 - 1) / s.tiles_per_item1;
  const int groups2 = (s.g2.tiles + s.tiles_per_item2 - 1) / s.tiles_per_item2;
  const int n1 = slots * groups1;
  const int items = n1 + (s.phases >= 2 ? slots * groups2 : 0);
  const int act_area = max(act_bytes(s.g1.chunks, rows_cap), act_bytes(s.g2.chunks, rows_cap));
  WeightRing<kStages> ring;
  ring.init(smem + act_area + warp * warp_ring_bytes(kStages), bars[warp]);
  int index = blockIdx.x;
  Item it{};
  int groups = 0;
  if (index < items) {
    it = item_at(s, index, n1, groups1, groups2);
    const GemvArgs& a = it.gemm1 ? s.g1 : s.g2;
    groups = aim_ring(ring, a, it, route.slot_expert[it.slot]);
    if (lane == 0) ring.issue_first(groups);
  }
  // The counters are clear (stream_clear_kernel) and the previous forward is complete after this.
  cudaGridDependencySynchronize();
  cudaTriggerProgrammaticLaunchCompletion();
  int32_t* const slot_done = s.counters;
  int32_t* const group_done = s.counters + kMaxStreamSlots;

  for (; index < items; index += gridDim.x) {
    const GemvArgs& a = it.gemm1 ? s.g1 : s.g2;
    const int expert = route.slot_expert[it.slot];
    const int row0 = route.slot_row0[it.slot], rows = route.slot_rows[it.slot];
    if (!it.gemm1) {
      // GEMM2 reads every intermediate feature of its slot: wait for the slot's GEMM1 items (their
      // stores, then a fence, then the count; here an acquire load, then the block barrier).
      kernels::block_wait_count(&slot_done[it.slot], groups1);
      stage_rows<false, kThreads, 2>(a, row0, rows, nullptr, smem);
    } else {
      stage_rows<true, kThreads, 2>(a, row0, rows, route.row_pair + row0, smem);
    }
    __syncthreads();
    const int stride = act_row_stride(a.chunks);
    const uint32_t b_rows[1] = {kernels::shared_address(smem + min(lane >> 2, rows_cap - 1) * stride + (lane & 3) * 16)};
    float chains[2][1][4] = {};
    if (it.gemm1)
      consume_ring<kWide1>(ring, groups, b_rows, chains);
    else
      consume_ring<kWide2>(ring, groups, b_rows, chains);
    // The ring is drained: request the next item's first stages before this item's sums and stores.
    const Item cur = it;
    const int next = index + static_cast<int>(gridDim.x);
    if (next < items) {
      it = item_at(s, next, n1, groups1, groups2);
      groups = aim_ring(ring, it.gemm1 ? s.g1 : s.g2, it, route.slot_expert[it.slot]);
      if (lane == 0) ring.issue_first(groups);
    }
    float acc[1][4];
    sum_chains<1, kWarps>(chains, acc, cur.ksplit, partial);
    if (cur.tile < a.tiles && cur.split == 0) {
      if (cur.gemm1)
        store_gemm1(a, acc, cur.tile, gemm1_bias(a, cur.tile, expert), row0, rows);
      else
        store_gemm2(a, acc, cur.tile, gemm2_bias(a, cur.tile, expert), row0, rows, [&](int r) { return route.weights[route.row_pair[row0 + r]]; });
    }
    // The block's stores, then thread 0's fence and count (CUTLASS's semaphore pattern).
    __syncthreads();
    if (cur.gemm1) {
      if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(&slot_done[cur.slot], 1);
      }
    } else if (s.phases >= 3) {
      if (threadIdx.x == 0) {
        __threadfence();
        last = atomicAdd(&group_done[cur.group], 1) == slots - 1;
        if (last) __threadfence();
      }
      __syncthreads();
      if (last) {
        const int cols = s.tiles_per_item2 * kTileRows;
        combine_columns<kThreads>(s.g2, &route, cur.group * cols, cols);
      }
    }
  }
}

size_t stream_smem(int k1, int k2, int rows_cap, int stages) {
  auto chunks = [](int k) { return (k / 32 + kChunkBlocks - 1) / kChunkBlocks; };
  return static_cast<size_t>(std::max(act_bytes(chunks(k1), rows_cap), act_bytes(chunks(k2), rows_cap))) +
         kWarps * warp_ring_bytes(stages);
}

template <class F>
void for_each_variant(F&& f) {
  f(stream_kernel<false, false, 2>, 2);
  f(stream_kernel<false, true, 2>, 2);
  f(stream_kernel<true, false, 2>, 2);
  f(stream_kernel<true, true, 2>, 2);
#if !defined(MXMOE_MINIMAL)
  f(stream_kernel<false, false, 3>, 3);
  f(stream_kernel<false, true, 3>, 3);
  f(stream_kernel<true, false, 3>, 3);
  f(stream_kernel<true, true, 3>, 3);
#endif
}

using Kernel = void (*)(StreamArgs, int);

Kernel kernel_for(bool wide1, bool wide2, int stages) {
  Kernel chosen = nullptr;
  int i = 0;
  // Variants in for_each_variant's order: (wide1, wide2) in binary, then the depth.
  const int want = (wide1 ? 2 : 0) + (wide2 ? 1 : 0);
  for_each_variant([&](Kernel k, int depth) {
    if (depth == stages && i % 4 == want) chosen = k;
    ++i;
  });
  return chosen;
}

}  // namespace

bool stream_stages_built(int stages) {
  bool built = false;
  for_each_variant([&](Kernel, int depth) { built = built || depth == stages; });
  return built;
}

StreamPlan plan_stream(int tiles1, int tiles2, int slots, int resident_blocks, int forced_ksplit) {
  StreamPlan p;
  if (slots <= 0 || resident_blocks <= 0) return p;
  // The fewest tiles per item (the most warps per tile) whose items still fit the resident grid.
  auto pick = [&](int tiles) {
    if (forced_ksplit > 0) return kWarps / forced_ksplit;
    for (int per = 1; per < kWarps; per *= 2)
      if (int64_t{slots} * ((tiles + per - 1) / per) <= resident_blocks) return per;
    return kWarps;
  };
  p.tiles_per_item1 = pick(tiles1);
  p.tiles_per_item2 = pick(tiles2);
  const int64_t items1 = int64_t{slots} * ((tiles1 + p.tiles_per_item1 - 1) / p.tiles_per_item1);
  const int64_t items2 = int64_t{slots} * ((tiles2 + p.tiles_per_item2 - 1) / p.tiles_per_item2);
  p.blocks = static_cast<int>(std::min<int64_t>(resident_blocks, std::max(items1, items2)));
  return p;
}

int stream_resident_blocks(int k1, int k2, int tokens, int stages, int sm_count) {
  // The fewest of the depth's variants (their registers may differ): every one must be fully resident.
  int fewest = -1;
  const size_t smem = stream_smem(k1, k2, std::max(tokens, 1), stages);
  for_each_variant([&](Kernel kernel, int depth) {
    if (depth != stages) return;
    int per_sm = 0;
    MXMOE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem));
    fewest = fewest < 0 ? per_sm : std::min(fewest, per_sm);
  });
  return std::max(fewest, 0) * sm_count;
}

void configure_stream(size_t smem_per_block_optin) {
  for_each_variant([&](Kernel kernel, int) {
    cudaFuncAttributes attr{};
    MXMOE_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
    MXMOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem_per_block_optin - attr.sharedSizeBytes)));
  });
}

void launch_stream(const StreamArgs& args, int tokens, const StreamPlan& plan, cudaStream_t stream) {
  if (tokens == 0) return;
  MXMOE_REQUIRE(tokens <= kStreamMaxTokens, "gemv stream: T = ", tokens, " is above ", kStreamMaxTokens);
  MXMOE_REQUIRE(plan.blocks > 0, "gemv stream: no resident grid for this shape");
  MXMOE_REQUIRE(args.g1.stages == args.g2.stages, "gemv stream: both GEMMs need the same ring depth");
  const Kernel kernel = kernel_for(args.g1.wide_scales, args.g2.wide_scales, args.g1.stages);
  MXMOE_REQUIRE(kernel != nullptr, "gemv stream: ", args.g1.stages, " ring stages are not built");
  StreamArgs s = args;
  s.g1.tokens = s.g2.tokens = tokens;
  s.tiles_per_item1 = plan.tiles_per_item1;
  s.tiles_per_item2 = plan.tiles_per_item2;
  const size_t smem = stream_smem(s.g1.k, s.g2.k, tokens, s.g1.stages);
  kernels::launch_with_pdl(stream_clear_kernel, dim3(1), dim3(256), 0, stream, s.counters,
                           stream_counter_count(s.g2.n));
  kernels::launch_with_pdl(kernel, dim3(plan.blocks), dim3(kThreads), smem, stream, s, tokens);
}

}  // namespace mxmoe::gemv
