// route + permute: top-k and softmax per token (or the engine's ids and weights as given), histogram,
// scan and the stable order (expert, then token, then slot), deterministic and without a host round
// trip. Up to kSingleBlockTokens tokens one block does everything (no global atomics); above, many
// blocks route into per-segment histograms, and a second launch ranks each segment's pairs in its own
// block (docs/gpu-pipeline.md).
#include <cfloat>
#include <algorithm>
#include <climits>

#include "common/pdl_launch.cuh"
#include "common/cuda_check.hpp"
#include "routing/routing.hpp"
#include "common/routed_pairs.cuh"
#include "common/warp_topk.cuh"

namespace mxmoe::routing {
namespace {

constexpr int kMaxThreads = 512;
constexpr int kMaxWarps = kMaxThreads / 32;
// Up to this many tokens one block routes and ranks everything (no histogram in global memory).
constexpr int64_t kSingleBlockTokens = 8;

struct RouteArgs {
  RouteSource source;
  int tokens, experts, top_k;
  bool softmax_first, renormalize;
  RoutingBuffers out;
};

// Token t's pair of this lane (lanes below k), into the routing buffers and the shared histogram; a
// dropped pair (kDroppedPairId) is stored as it is and counted nowhere: it gets no row.
__device__ void store_pair(const RouteArgs& a, int t, int lane, int id, float weight, int* counts) {
  if (lane < a.top_k) {
    const int p = t * a.top_k + lane;
    a.out.expert_ids[p] = id;
    a.out.pair_weights[p] = weight;
    if (id != kDroppedPairId) atomicAdd(&counts[id], 1);
  }
}

// Token t's top-k and weights (warp_route_token), or its given pairs (load_routed_pairs): lane s < k
// holds slot s. Warp-collective.
__device__ void top_k_of(const RouteArgs& a, int t, int lane, int& id, float& weight) {
  if (a.source.topk_ids != nullptr)
    load_routed_pairs(a.source.topk_ids, a.source.ids64, a.source.topk_weights, static_cast<int64_t>(t) * a.top_k,
                      a.top_k, a.top_k, a.experts, lane, id, weight);
  else
    warp_route_token(a.source.logits + static_cast<int64_t>(t) * a.experts, a.experts, a.top_k, a.softmax_first,
                     a.renormalize, lane, id, weight);
}

__device__ void route_token(const RouteArgs& a, int t, int lane, int* counts) {
  int my_id;
  float my_weight;
  top_k_of(a, t, lane, my_id, my_weight);
  store_pair(a, t, lane, my_id, my_weight, counts);
}

// 2. Scan of the histogram and the list of active experts (warp 0; 8 experts per lane); `publish`: also
// into the routing buffers (one block of a launch does).
__device__ void scan_experts(const RouteArgs& a, const int* counts, int* offsets, bool publish) {
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
      if (publish) {
        a.out.expert_offsets[e] = run;
        if (local[j] > 0) a.out.active_experts[run_active++] = e;
      }
    }
    run += local[j];
  }
  if (lane == 31) {
    offsets[a.experts] = incl;
    if (publish) {
      a.out.expert_offsets[a.experts] = incl;
      *a.out.active_count = incl_active;
    }
  }
}

// 3. Stable ranks of pairs [begin, end) in order p = t*k + s, a chunk of blockDim pairs at a time;
// running[e]: expert e's rows before pair `begin` (set by the caller). The expert ids may have been
// written by other blocks: read them past L1.
__device__ void rank_pairs(const RouteArgs& a, const int* offsets, int* running, int (*warp_counts)[kMaxExperts],
                           int begin, int pairs) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int threads = blockDim.x, warps = threads / 32;
  const unsigned lanes_below = (1u << lane) - 1u;
  for (int base = begin; base < pairs; base += threads) {
    for (int i = tid; i < warps * kMaxExperts; i += threads) (&warp_counts[0][0])[i] = 0;
    __syncthreads();
    const int p = base + tid;
    const int id = p < pairs ? __ldcg(a.out.expert_ids + p) : kDroppedPairId;
    const bool valid = id != kDroppedPairId;
    if (p < pairs && !valid) a.out.pair_row[p] = -1;  // a dropped pair: no row, the combines skip it
    const int e = valid ? id : -1 - lane;  // invalid lanes match nobody
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

// After the wait (the previous forward is complete), one block: the counts the next kernels count on.
__device__ void clear_zero_counts(const RouteArgs& a) {
  if (a.out.zero_counts != nullptr)
    for (int e = threadIdx.x; e < a.experts; e += blockDim.x) a.out.zero_counts[e] = 0;
}

// Small T: everything in one block (block size scales with T: a decode step needs a few warps, at
// least kMinSingleBlockThreads).
constexpr int kMinSingleBlockThreads = 128;
constexpr int kTokensPerWarp = static_cast<int>((kSingleBlockTokens * 32 + kMinSingleBlockThreads - 1) / kMinSingleBlockThreads);
__global__ void __launch_bounds__(kMaxThreads) route_permute_kernel(RouteArgs a) {
  __shared__ int counts[kMaxExperts];
  __shared__ int offsets[kMaxExperts + 1];
  __shared__ int running[kMaxExperts];
  __shared__ int warp_counts[kMaxWarps][kMaxExperts];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, warps = blockDim.x / 32;
  // The top-k reads only the logits (or the given ids and weights), which are complete when the forward
  // is enqueued (docs/gpu-pipeline.md): it runs before the wait, under the predecessor's tail. Its results are
  // written after the wait, since the previous forward may still read the routing buffers.
  int ids[kTokensPerWarp];
  float weights[kTokensPerWarp];
#pragma unroll
  for (int j = 0; j < kTokensPerWarp; ++j) {
    const int t = warp + j * warps;
    if (t < a.tokens) top_k_of(a, t, lane, ids[j], weights[j]);
  }
  // Programmatic dependent launch: wait for the predecessor, then let the next kernel launch; it may
  // read our inputs (the logits, or ids and weights) at once, our outputs only after its wait.
  kernels::pdl_wait();
  kernels::pdl_trigger();
  clear_zero_counts(a);
  for (int e = tid; e < kMaxExperts; e += blockDim.x) counts[e] = running[e] = 0;
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kTokensPerWarp; ++j) {
    const int t = warp + j * warps;
    if (t < a.tokens) store_pair(a, t, lane, ids[j], weights[j], counts);
  }
  __syncthreads();
  scan_experts(a, counts, offsets, true);
  __syncthreads();
  rank_pairs(a, offsets, running, warp_counts, 0, a.tokens * a.top_k);
}

// Larger T, two launches. First, one warp per token over many blocks; each block adds its histogram
// into its segment's (segment_tokens tokens; segment_counts starts at zero: the launcher clears it).
__global__ void __launch_bounds__(kMaxThreads) route_count_kernel(RouteArgs a, int segment_tokens) {
  __shared__ int counts[kMaxExperts];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int e = tid; e < kMaxExperts; e += blockDim.x) counts[e] = 0;
  __syncthreads();
  const int t0 = static_cast<int>(blockIdx.x) * kMaxWarps;
  if (t0 + warp < a.tokens) route_token(a, t0 + warp, lane, counts);
  __syncthreads();
  int* segment = a.out.segment_counts + static_cast<int64_t>(t0 / segment_tokens) * a.experts;
  for (int e = tid; e < a.experts; e += blockDim.x)
    if (counts[e] > 0) atomicAdd(segment + e, counts[e]);
}

// Then one block per segment: the histogram (every segment's counts summed), the scan (block 0
// publishes it), and the stable ranks of the segment's own pairs after the rows of the segments
// before it. Every block reads the whole count table from L2 (segments <= kMaxRouteSegments), in
// exchange for ranks that are not serialised in one block (with one block ranking every pair, the
// route took 67 us of gpt-oss-120b's layer at T = 4096 on an H200; 13 us now).
__global__ void __launch_bounds__(kMaxThreads) rank_segments_kernel(RouteArgs a, int segment_tokens) {
  __shared__ int counts[kMaxExperts];
  __shared__ int offsets[kMaxExperts + 1];
  __shared__ int running[kMaxExperts];
  __shared__ int warp_counts[kMaxWarps][kMaxExperts];
  kernels::pdl_wait();
  kernels::pdl_trigger();
  if (blockIdx.x == 0) clear_zero_counts(a);
  const int tid = threadIdx.x, me = static_cast<int>(blockIdx.x), segments = static_cast<int>(gridDim.x);
  for (int e = tid; e < kMaxExperts; e += blockDim.x) {
    int total = 0, before = 0;
    if (e < a.experts) {
#pragma unroll 8
      for (int s = 0; s < segments; ++s) {
        const int v = __ldcg(a.out.segment_counts + static_cast<int64_t>(s) * a.experts + e);
        total += v;
        before += s < me ? v : 0;
      }
    }
    counts[e] = total;
    running[e] = before;
  }
  __syncthreads();
  scan_experts(a, counts, offsets, me == 0);
  __syncthreads();
  const int begin = me * segment_tokens * a.top_k;
  rank_pairs(a, offsets, running, warp_counts, begin, min(a.tokens, (me + 1) * segment_tokens) * a.top_k);
}

}  // namespace

void route_and_permute(const MoeConfig& config, const RouteSource& source, int64_t tokens,
                       const RoutingBuffers& buffers, cudaStream_t stream) {
  // MoeConfig::validate holds E <= kMaxExperts and k <= kMaxTopk, the sizes this kernel is built for.
  RouteArgs a{source,
              static_cast<int>(tokens),
              config.num_experts,
              config.top_k,
              config.routing == RoutingOrder::SoftmaxThenTopk,
              config.renormalize,
              buffers};
  if (tokens <= kSingleBlockTokens) {
    const auto threads = static_cast<unsigned>(
        std::clamp<int64_t>((tokens * config.top_k + 31) / 32 * 32, kMinSingleBlockThreads, kMaxThreads));
    kernels::launch_with_pdl(route_permute_kernel, dim3(1), dim3(threads), 0, stream, a);
    return;
  }
  const int segment_tokens = route_segment_tokens(tokens);
  const int64_t segments = (tokens + segment_tokens - 1) / segment_tokens;
  MXMOE_CUDA_CHECK(cudaMemsetAsync(buffers.segment_counts, 0, segments * config.num_experts * sizeof(int32_t), stream));
  const auto blocks = static_cast<unsigned>((tokens + kMaxWarps - 1) / kMaxWarps);
  route_count_kernel<<<blocks, kMaxThreads, 0, stream>>>(a, segment_tokens);
  MXMOE_CUDA_CHECK_LAUNCH();
  kernels::launch_with_pdl(rank_segments_kernel, dim3(static_cast<unsigned>(segments)), dim3(kMaxThreads), 0, stream, a,
                           segment_tokens);
}

}  // namespace mxmoe::routing
