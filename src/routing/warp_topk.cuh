#pragma once
// Top-k selection of one token's router logits by one warp: larger logit first, ties to the lower
// expert id; a NaN logit is selected as if it were -inf (so it loses to every finite logit, and a
// tie with a real -inf goes to the lower id), but its raw value is kept: a softmax over it (the
// selected k, or all E in softmax-first order) turns NaN. Shared by the route kernel and GEMM1's local routing (the two must
// agree bit for bit on the selection).
#include <climits>
#include <cmath>

#include "mxmoe/config.hpp"

namespace mxmoe::routing {

using mxmoe::kMaxExperts;
using mxmoe::kMaxTopk;
inline constexpr int kMaxPerLane = kMaxExperts / 32;

// a beats b: larger value, ties to the lower expert id.
__device__ __forceinline__ bool beats(float av, int ai, float bv, int bi) { return av > bv || (av == bv && ai < bi); }

// row: the token's E logits. On return, on every lane: sel_id[s] and sel_val[s] (raw logit) for
// s < top_k, and raw[j] = logit of expert lane + 32 j (-inf past E).
__device__ __forceinline__ void warp_topk(const float* row, int experts, int top_k, int lane, float (&raw)[kMaxPerLane],
                                          float (&sel_val)[kMaxTopk], int (&sel_id)[kMaxTopk]) {
  float v[kMaxPerLane];
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    const int e = lane + 32 * j;
    raw[j] = e < experts ? row[e] : -INFINITY;
    v[j] = e < experts ? (isnan(raw[j]) ? -INFINITY : raw[j]) : -INFINITY;
  }
  unsigned taken = 0;
#pragma unroll
  for (int s = 0; s < kMaxTopk; ++s) {
    if (s >= top_k) break;
    float best_v = -INFINITY;
    int best_i = INT_MAX;
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j) {
      const int e = lane + 32 * j;
      if (e < experts && !(taken >> j & 1u) && beats(v[j], e, best_v, best_i)) {
        best_v = v[j];
        best_i = e;
      }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, best_v, off);
      const int oi = __shfl_xor_sync(0xffffffffu, best_i, off);
      if (beats(ov, oi, best_v, best_i)) {
        best_v = ov;
        best_i = oi;
      }
    }
    if ((best_i & 31) == lane) taken |= 1u << (best_i / 32);
    float raw_v = -INFINITY;
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j)
      if (lane + 32 * j == best_i) raw_v = raw[j];
    sel_val[s] = __shfl_sync(0xffffffffu, raw_v, best_i & 31);
    sel_id[s] = best_i;
  }
}

// The routing of one token by one warp: its top_k experts (slot order: descending logit) and their
// weights, top-k then softmax or softmax over all E then top-k (optionally renormalised). On return,
// lane s < top_k holds slot s: my_id and my_weight. The route kernel and the fused decode kernel
// both call this, so they agree bit for bit.
__device__ __forceinline__ void warp_route_token(const float* row, int experts, int top_k, bool softmax_first,
                                                 bool renormalize, int lane, int& my_id, float& my_weight) {
  float raw[kMaxPerLane];
  float sel_val[kMaxTopk];
  int sel_id[kMaxTopk];
  warp_topk(row, experts, top_k, lane, raw, sel_val, sel_id);
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

}  // namespace mxmoe::routing
