// route + permute: top-k and softmax per token, histogram, scan and the stable order (expert, then
// token, then slot), deterministic and without a host round trip. Up to kSingleBlockTokens tokens
// one block does everything (no global atomics); above, many blocks route and the last one to
// finish scans and ranks (docs/gpu-pipeline.md).
#include <cfloat>
#include <algorithm>
#include <climits>

#include "kernels/common/pdl_launch.cuh"
#include "moe/cuda_check.hpp"
#include "routing/routing.hpp"
#include "routing/warp_topk.cuh"

namespace mxmoe::routing {
namespace {

constexpr int kMaxThreads = 512;
constexpr int kMaxWarps = kMaxThreads / 32;
// Up to this many tokens one block routes and ranks everything (no histogram in global memory).
constexpr int64_t kSingleBlockTokens = 8;

struct RouteArgs {
  const float* logits;
  int tokens, experts, top_k;
  bool softmax_first, renormalize;
  RoutingBuffers out;
};

__device__ void route_token(const RouteArgs& a, int t, int lane, int* counts) {
  int my_id;
  float my_weight;
  warp_route_token(a.logits + static_cast<int64_t>(t) * a.experts, a.experts, a.top_k, a.softmax_first, a.renormalize,
                   lane, my_id, my_weight);
  if (lane < a.top_k) {
    const int p = t * a.top_k + lane;
    a.out.expert_ids[p] = my_id;
    a.out.pair_weights[p] = my_weight;
    atomicAdd(&counts[my_id], 1);
  }
}

// 2. Scan of the histogram and the list of active experts (warp 0; 8 experts per lane).
__device__ void scan_experts(const RouteArgs& a, const int* counts, int* offsets) {
  const int lane = threadIdx.x & 31;
  if (threadIdx.x >= 32) return;
  int local[kMaxPerLane];
  int sum = 0, active = 0;
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    const int e = lane * kMaxPerLane + j;
    local[j] = e < a.experts ? counts[e] : 0;
    sum += local[j];
    active += local[j] > 0;
  }
  int incl = sum, incl_active = active;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const int s = __shfl_up_sync(0xffffffffu, incl, off);
    const int sa = __shfl_up_sync(0xffffffffu, incl_active, off);
    if (lane >= off) {
      incl += s;
      incl_active += sa;
    }
  }
  int run = incl - sum, run_active = incl_active - active;
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    const int e = lane * kMaxPerLane + j;
    if (e < a.experts) {
      offsets[e] = run;
      a.out.expert_offsets[e] = run;
      if (local[j] > 0) a.out.active_experts[run_active++] = e;
    }
    run += local[j];
  }
  if (lane == 31) {
    offsets[a.experts] = incl;
    a.out.expert_offsets[a.experts] = incl;
    *a.out.active_count = incl_active;
  }
}

// 3. Stable ranks: pairs in order p = t*k + s, a chunk of blockDim pairs at a time. The expert ids
// may have been written by other blocks: read them past L1.
__device__ void rank_pairs(const RouteArgs& a, const int* offsets, int* running, int (*warp_counts)[kMaxExperts]) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int threads = blockDim.x, warps = threads / 32;
  for (int e = tid; e < kMaxExperts; e += threads) running[e] = 0;
  const int pairs = a.tokens * a.top_k;
  const unsigned lanes_below = (1u << lane) - 1u;
  for (int base = 0; base < pairs; base += threads) {
    for (int i = tid; i < warps * kMaxExperts; i += threads) (&warp_counts[0][0])[i] = 0;
    __syncthreads();
    const int p = base + tid;
    const bool valid = p < pairs;
    const int e = valid ? __ldcg(a.out.expert_ids + p) : -1 - lane;  // invalid lanes match nobody
    const unsigned same = __match_any_sync(0xffffffffu, e);
    const int rank_in_warp = __popc(same & lanes_below);
    if (valid && rank_in_warp == 0) warp_counts[warp][e] = __popc(same);
    __syncthreads();
    if (valid) {
      int before = running[e];
      for (int w = 0; w < warp; ++w) before += warp_counts[w][e];
      const int row = offsets[e] + before + rank_in_warp;
      a.out.row_pair[row] = p;
      a.out.pair_row[p] = row;
    }
    __syncthreads();
    for (int x = tid; x < a.experts; x += threads) {
      int add = 0;
      for (int w = 0; w < warps; ++w) add += warp_counts[w][x];
      running[x] += add;
    }
    __syncthreads();
  }
}

// Small T: everything in one block (block size scales with T: a decode step needs a few warps).
__global__ void __launch_bounds__(kMaxThreads) route_permute_kernel(RouteArgs a) {
  __shared__ int counts[kMaxExperts];
  __shared__ int offsets[kMaxExperts + 1];
  __shared__ int running[kMaxExperts];
  __shared__ int warp_counts[kMaxWarps][kMaxExperts];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // Programmatic dependent launch (docs/gpu-pipeline.md): wait for the predecessor, then let the
  // next kernel launch; it may read our inputs (the logits) at once, our outputs only after its wait.
  cudaGridDependencySynchronize();
  cudaTriggerProgrammaticLaunchCompletion();
  for (int e = tid; e < kMaxExperts; e += blockDim.x) counts[e] = 0;
  __syncthreads();
  for (int t = warp; t < a.tokens; t += blockDim.x / 32) route_token(a, t, lane, counts);
  __syncthreads();
  scan_experts(a, counts, offsets);
  __syncthreads();
  rank_pairs(a, offsets, running, warp_counts);
}

// Larger T: one warp per token over many blocks, a global histogram, and the last block to finish
// (a ticket counter) does the scan and the ranks. global_counts and the ticket start at zero (the
// launcher clears them in the same stream).
__global__ void __launch_bounds__(kMaxThreads) route_permute_multiblock_kernel(RouteArgs a) {
  __shared__ int counts[kMaxExperts];
  __shared__ int offsets[kMaxExperts + 1];
  __shared__ int running[kMaxExperts];
  __shared__ int warp_counts[kMaxWarps][kMaxExperts];
  __shared__ bool last;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int t = blockIdx.x * (blockDim.x / 32) + warp;
  if (t < a.tokens) route_token(a, t, lane, a.out.global_counts);
  __threadfence();
  __syncthreads();
  if (tid == 0) last = atomicAdd(a.out.ticket, 1) == static_cast<int>(gridDim.x) - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int e = tid; e < kMaxExperts; e += blockDim.x) counts[e] = e < a.experts ? __ldcg(a.out.global_counts + e) : 0;
  __syncthreads();
  scan_experts(a, counts, offsets);
  __syncthreads();
  rank_pairs(a, offsets, running, warp_counts);
}

}  // namespace

void route_and_permute(const MoeConfig& config, const float* logits, int64_t tokens, const RoutingBuffers& buffers,
                       cudaStream_t stream) {
  // MoeConfig::validate holds E <= kMaxExperts and k <= kMaxTopk, the sizes this kernel is built for.
  RouteArgs a{logits,
              static_cast<int>(tokens),
              config.num_experts,
              config.top_k,
              config.routing == RoutingOrder::SoftmaxThenTopk,
              config.renormalize,
              buffers};
  if (tokens <= kSingleBlockTokens) {
    const auto threads = static_cast<unsigned>(std::clamp<int64_t>((tokens * config.top_k + 31) / 32 * 32, 128, kMaxThreads));
    kernels::launch_with_pdl(route_permute_kernel, dim3(1), dim3(threads), 0, stream, a);
    return;
  }
  MXMOE_CUDA_CHECK(cudaMemsetAsync(buffers.global_counts, 0, (kMaxExperts + 1) * sizeof(int32_t), stream));
  const int tokens_per_block = kMaxThreads / 32;
  const auto blocks = static_cast<unsigned>((tokens + tokens_per_block - 1) / tokens_per_block);
  route_permute_multiblock_kernel<<<blocks, kMaxThreads, 0, stream>>>(a);
  MXMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace mxmoe::routing
