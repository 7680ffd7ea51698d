#pragma once
// Top-k selection of one token's router logits by one warp: larger logit first, ties to the lower
// expert id; a NaN logit is selected as if it were -inf (so it loses to every finite logit, and a
// tie with a real -inf goes to the lower id), but its raw value is kept: a softmax over it (the
// selected k, or all E in softmax-first order) turns NaN. Shared by the route kernel and the GEMV
// blocks' own routing (they must agree bit for bit on the selection).
#include <climits>
#include <cmath>

#include "mxmoe/config.hpp"

namespace mxmoe::routing {

using mxmoe::kMaxExperts;
using mxmoe::kMaxTopk;
inline constexpr int kMaxPerLane = kMaxExperts / 32;

// The selection order of a logit as an unsigned key: a larger logit gets a larger key, -0 and +0 the
// same key (they tie), NaN the key of -inf. Every key of a logit is above 0, which marks experts that
// are absent or already taken.
__device__ __forceinline__ unsigned order_key(float v) {
  if (isnan(v)) v = -INFINITY;
  const unsigned b = __float_as_uint(v == 0.f ? 0.f : v);
  return b & 0x80000000u ? ~b : b | 0x80000000u;
}

// The lane's logits of one token (row: its E logits): raw[j] = logit of expert lane + 32 j, -inf
// past E. Separate from the selection so that a warp routing several tokens can request the next
// token's logits before it selects this one's.
__device__ __forceinline__ void load_logits(const float* row, int experts, int lane, float (&raw)[kMaxPerLane]) {
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    const int e = lane + 32 * j;
    raw[j] = e < experts ? row[e] : -INFINITY;
  }
}

// raw: the token's logits as load_logits leaves them. On return, on every lane: sel_id[s] and
// sel_val[s] (raw logit) for s < top_k. Each pick is two warp reductions (redux.sync): the largest
// key, then the lowest expert id holding it. Expert lane + 32 j is (j << 5) | lane, so the minimum
// over those ids is the lower-id tie-break. The chain per pick is a few instructions long, which
// matters where the routing runs inside a busy GEMM block.
__device__ __forceinline__ void warp_topk(const float (&raw)[kMaxPerLane], int experts, int top_k, int lane,
                                          float (&sel_val)[kMaxTopk], int (&sel_id)[kMaxTopk]) {
  unsigned key[kMaxPerLane];
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) key[j] = lane + 32 * j < experts ? order_key(raw[j]) : 0u;
#pragma unroll
  for (int s = 0; s < kMaxTopk; ++s) {
    if (s >= top_k) break;
    unsigned mine = 0;
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j) mine = max(mine, key[j]);
    const unsigned best = __reduce_max_sync(0xffffffffu, mine);
    unsigned cand = UINT_MAX;
#pragma unroll
    for (int j = kMaxPerLane - 1; j >= 0; --j)
      if (key[j] == best) cand = static_cast<unsigned>(lane + 32 * j);
    const int id = static_cast<int>(__reduce_min_sync(0xffffffffu, cand));
    float raw_v = -INFINITY;
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j)
      if (lane + 32 * j == id) {
        raw_v = raw[j];
        key[j] = 0u;
      }
    sel_val[s] = __shfl_sync(0xffffffffu, raw_v, id & 31);
    sel_id[s] = id;
  }
}

// The routing of one token by one warp, from its logits as load_logits leaves them: its top_k experts
// (slot order: descending logit) and their weights, top-k then softmax or softmax over all E then
// top-k (optionally renormalised). On return, lane s < top_k holds slot s: my_id and my_weight. The
// route kernel and the GEMV blocks' own routing both call this, so they agree bit for bit.
__device__ __forceinline__ void warp_route_logits(const float (&raw)[kMaxPerLane], int experts, int top_k,
                                                  bool softmax_first, bool renormalize, int lane, int& my_id,
                                                  float& my_weight) {
  float sel_val[kMaxTopk];
  int sel_id[kMaxTopk];
  warp_topk(raw, experts, top_k, lane, sel_val, sel_id);
  const float top = sel_val[0];
  float denom = 0.f;
  if (softmax_first) {
    float z = 0.f;
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j)
      if (lane + 32 * j < experts) z += __expf(raw[j] - top);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) z += __shfl_xor_sync(0xffffffffu, z, off);
    denom = z;
    if (renormalize) {
      denom = 0.f;
#pragma unroll
      for (int s = 0; s < kMaxTopk; ++s)
        if (s < top_k) denom += __expf(sel_val[s] - top);
    }
  } else {
#pragma unroll
    for (int s = 0; s < kMaxTopk; ++s)
      if (s < top_k) denom += __expf(sel_val[s] - top);
  }
  float my_val = sel_val[0];
  my_id = sel_id[0];
#pragma unroll
  for (int s = 1; s < kMaxTopk; ++s)
    if (s == lane) {
      my_val = sel_val[s];
      my_id = sel_id[s];
    }
  my_weight = __expf(my_val - top) / denom;
}

// warp_route_logits of row (the token's E logits).
__device__ __forceinline__ void warp_route_token(const float* row, int experts, int top_k, bool softmax_first,
                                                 bool renormalize, int lane, int& my_id, float& my_weight) {
  float raw[kMaxPerLane];
  load_logits(row, experts, lane, raw);
  warp_route_logits(raw, experts, top_k, softmax_first, renormalize, lane, my_id, my_weight);
}

}  // namespace mxmoe::routing
