// The CPU reference of one shard's partial output (mxmoe/shard.hpp). Tensor-parallel: the ordinary
// reference on the rank's slice (its config has I = the slice, and its weights carry b2 on rank 0 only).
// Expert-parallel: the whole layer's routing, then each slot s as a top-1 layer over the rank's experts,
// where a pair on another rank becomes weight 0 on local expert 0 (an exact 0 added: the expert's output
// is finite), summed over the slots in slot order.
#include <algorithm>
#include <vector>

#include "mxmoe/error.hpp"
#include "mxmoe/reference.hpp"
#include "mxmoe/shard.hpp"
#include "reference/routed_reference.hpp"

namespace mxmoe {

void reference_shard_f64(const LayerShard& shard, const MoeWeights& weights, std::span<const uint16_t> hidden,
                         std::span<const float> logits, int64_t tokens, std::span<double> out,
                         const ReferenceOptions& options) {
  const MoeConfig& full = shard.full;
  MXMOE_REQUIRE(tokens >= 0, "reference_shard_f64: tokens = ", tokens, ": expected >= 0");
  MXMOE_REQUIRE(static_cast<int64_t>(out.size()) == tokens * full.hidden, "reference_shard_f64: out: expected ",
                tokens * full.hidden, " elements, got ", out.size());
  if (shard.spec.mode == ShardMode::Tensor) {
    reference_moe_f64(shard.local, weights, hidden, logits, tokens, out, options);
    return;
  }
  MXMOE_REQUIRE(static_cast<int64_t>(logits.size()) == tokens * full.num_experts,
                "reference_shard_f64: logits: expected ", tokens * full.num_experts, " elements, got ", logits.size());
  const int k = full.top_k;
  std::vector<int32_t> ids(static_cast<size_t>(tokens * k));
  std::vector<float> route_weights(ids.size());
  reference_route(full, logits, tokens, ids, route_weights);

  MoeConfig top1 = shard.local;
  top1.top_k = 1;
  std::fill(out.begin(), out.end(), 0.0);
  std::vector<int32_t> slot_ids(static_cast<size_t>(tokens));
  std::vector<float> slot_weights(slot_ids.size());
  std::vector<double> slot_out(out.size());
  for (int s = 0; s < k; ++s) {
    bool any = false;
    for (int64_t t = 0; t < tokens; ++t) {
      const int32_t local = shard.global_to_local[ids[t * k + s]];
      slot_ids[t] = std::max(local, 0);
      slot_weights[t] = local >= 0 ? route_weights[t * k + s] : 0.f;
      any = any || local >= 0;
    }
    if (!any) continue;
    reference_moe_routed_f64(top1, weights, hidden, slot_ids, slot_weights, tokens, slot_out, options);
    for (size_t i = 0; i < out.size(); ++i) out[i] += slot_out[i];
  }
}

}  // namespace mxmoe
