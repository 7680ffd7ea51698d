// The block-scaled path's launch sequence: route, expand (bf16 -> MXFP8, swizzled scales) of the
// tokens, GEMM1 with the MXFP8 epilogue (it writes GEMM2's input), GEMM2, combine. With the plan's
// mx_expand_intermediate, GEMM1 writes fp32 rows and a second expand quantises them (the same bytes,
// one more pass). bench --stages: gemm1 includes the first expand, gemm2 the second.
#include "kernels/mma/mx_gemm.hpp"
#include "moe/gpu_layer.hpp"
#include "routing/expand.hpp"
#include "routing/routing.hpp"

namespace mxmoe {

void run_mx(const GpuLayer& layer, const plan::Plan& p, const ForwardArgs& f) {
  const MoeConfig& c = layer.config;
  const BoundWorkspace& ws = f.ws;
  const mma::MxAtom atom = p.mx_planted_fault ? mma::MxAtom::PlantedFault
                          : p.mx_native      ? mma::MxAtom::Native
                                             : mma::MxAtom::Emulated;
  routing::route_and_permute(c, f.route, f.tokens, ws.routing, f.stream);
  if (f.stages < 2) return;
  routing::ExpandArgs e;
  e.top_k = c.top_k;
  e.experts = c.num_experts;
  e.rule = ScaleRule::Rceil;
  e.codes = ws.mx_codes;
  e.scales = ws.mx_scales;
  e.act = f.hidden;
  e.gather = true;
  e.k = c.hidden;
  routing::expand_mxfp8(e, ws.routing, f.tokens, p.max_active, f.stream);
  mma::MxArgs a;
  a.codes = ws.mx_codes;
  a.scales = ws.mx_scales;
  layer.bind_routing(a, ws);
  layer.bind_weights(a, true);
  a.out = ws.intermediate;
  if (!p.mx_expand_intermediate) {
    a.out_codes = ws.mx_codes2;
    a.out_scales = ws.mx_scales2;
    a.floor_rule = e.rule == ScaleRule::Floor;
  }
  mma::launch_mx_gemm1(atom, a, f.tokens, p.max_active, f.stream);
  if (f.stages < 3) return;
  if (p.mx_expand_intermediate) {
    e.act = ws.intermediate;
    e.f32 = true;
    e.gather = false;
    e.k = c.intermediate;
    routing::expand_mxfp8(e, ws.routing, f.tokens, p.max_active, f.stream);
  } else {
    a.codes = ws.mx_codes2;
    a.scales = ws.mx_scales2;
  }
  a.out_codes = a.out_scales = nullptr;
  layer.bind_weights(a, false);
  a.out = ws.expert_rows;
  mma::launch_mx_gemm2(atom, a, f.tokens, p.max_active, f.stream);
  if (f.stages < 4) return;
  combine_expert_rows(layer, f, false);
}

}  // namespace mxmoe
