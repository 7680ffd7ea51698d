// The GEMV family's launch sequence: route (unless both GEMMs route the tokens themselves), GEMM1,
// GEMM2 (with the combine, or per slot as GEMM1 ends it), combine. Executes the plan as given.
#include "kernels/gemv/gemv.hpp"
#include "moe/gpu_layer.hpp"
#include "routing/routing.hpp"

namespace mxmoe {

void run_gemv(const GpuLayer& layer, const plan::Plan& p, const ForwardArgs& f) {
  const MoeConfig& c = layer.config;
  const BoundWorkspace& ws = f.ws;
  // With the route kernel and the combine kernel, GEMM2 may start each expert slot once GEMM1's blocks
  // for it are done (counted on counts the route zeroes), not when GEMM1's whole grid is.
  routing::RoutingBuffers routing_buffers = ws.routing;
  if (p.counted) routing_buffers.zero_counts = ws.expert_done;
  if (!p.local_route) routing::route_and_permute(c, f.route, f.tokens, routing_buffers, f.stream);
  if (f.stages < 2) return;

  gemv::GemvArgs a;
  layer.bind_routing(a, ws);
  // Routed locally, the blocks read the logits or the engine's ids and weights themselves.
  if (p.local_route) {
    a.logits = f.route.logits;
    a.topk_ids = f.route.topk_ids;
    a.ids64 = f.route.ids64;
    a.topk_weights = f.route.topk_weights;
  }
  a.softmax_first = c.routing == RoutingOrder::SoftmaxThenTopk;
  a.renormalize = c.renormalize;
  a.cluster_combine = p.cluster_combine;
  a.pair_row = ws.routing.pair_row;
  a.batch_rows = p.batch_rows;
  a.stages = p.stages;
  // GEMM1 clears the counts of GEMM2's combine, unless GEMM2 combines in clusters without them.
  a.combine_counters = ws.combine_counters;
  a.combine_counter_count = p.fused_combine && !p.cluster_combine ? gemv::combine_counters_needed(c.hidden) : 0;
  a.slot_done = p.counted ? ws.expert_done : nullptr;
  // GEMM1 reads the tokens and writes the bf16 intermediate.
  layer.bind_weights(a, true);
  a.wide_scales = layer.w1.wide_scales;
  a.ksplit = p.ksplit1;
  a.act = f.hidden;
  a.out = ws.intermediate;
  gemv::launch_gemm1(a, f.tokens, p.max_active, f.stream);
  if (f.stages < 3) return;

  // GEMM2 reads the intermediate and writes fp32 rows, or combines them itself.
  a.gemm1_blocks_per_slot = gemv::blocks_per_slot(a, f.tokens, p.max_active);
  layer.bind_weights(a, false);
  a.wide_scales = layer.w2.wide_scales;
  a.ksplit = p.ksplit2;
  a.act = static_cast<const uint16_t*>(ws.intermediate);
  a.out = ws.expert_rows;
  a.combine_out = p.fused_combine ? f.out : nullptr;
  a.pair_row_out = ws.routing.pair_row;
  gemv::launch_gemm2(a, f.tokens, p.max_active, f.stream);
  if (f.stages < 4 || p.fused_combine) return;
  combine_expert_rows(layer, f, false);
}

}  // namespace mxmoe
