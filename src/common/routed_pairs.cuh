#pragma once
// The engine's own routing (forward_routed): each token's k expert ids and weights read as given, one
// pair per lane of a warp. Shared by the route kernel and the GEMV blocks' own routing, so that both
// see the same pairs bit for bit, and both stay in bounds whatever the ids hold.
//
// An id of -1 drops its pair (vLLM's convention for another rank's expert under expert parallelism): it
// gets no row and adds nothing; a token whose k ids are all -1 gets a zero output row.
//
// The host cannot check device ids without reading them (forward must not), so a token whose other ids
// are not distinct experts in [0, E) is made harmless and visible here: its k pairs go to experts
// 0 .. k-1 (distinct and in range, k <= E, as every kernel after the route assumes: an expert has at
// most one row per token) with NaN weights, so the token's whole output row is NaN. Weights are used as
// given.
#include <cmath>
#include <cstdint>

#include "mxmoe/config.hpp"

namespace mxmoe::routing {

// Lane p < pairs holds pair first_pair + p; pairs covers whole tokens of top_k pairs (token p / top_k
// of the lanes). On return, lane p < pairs has its pair's expert id and weight. Every lane of the warp
// calls it (warp-collective).
__device__ __forceinline__ void load_routed_pairs(const void* ids, bool ids64, const float* weights,
                                                  int64_t first_pair, int pairs, int top_k, int experts, int lane,
                                                  int& my_id, float& my_weight) {
  const bool mine = lane < pairs;
  int64_t id = -1;
  float weight = 0.f;
  if (mine) {
    const int64_t p = first_pair + lane;
    id = ids64 ? static_cast<const int64_t*>(ids)[p] : static_cast<const int32_t*>(ids)[p];
    weight = weights[first_pair + lane];
  }
  const bool dropped = id == kDroppedPairId;
  const bool in_range = id >= 0 && id < experts;
  const int token = lane / top_k;
  // Lanes of one token naming the same expert share a key; every other lane's key is its own.
  const int key = mine && in_range ? token * kMaxExperts + static_cast<int>(id) : -1 - lane;
  const unsigned same = __match_any_sync(0xffffffffu, key);
  const unsigned bad = __ballot_sync(0xffffffffu, mine && !dropped && (!in_range || __popc(same) > 1));
  // token * top_k <= lane < 32, so the shift is defined; bits past 31 fall off.
  const unsigned token_lanes = ((1u << top_k) - 1u) << (token * top_k);
  if (mine && (bad & token_lanes) != 0u) {
    my_id = lane - token * top_k;
    my_weight = __int_as_float(0x7fc00000);  // quiet NaN
  } else if (dropped) {
    my_id = kDroppedPairId;
    my_weight = 0.f;
  } else {
    my_id = static_cast<int>(id);
    my_weight = weight;
  }
}

}  // namespace mxmoe::routing
