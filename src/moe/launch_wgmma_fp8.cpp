// The W4A8 wgmma family's launch sequence (Precision::Fp8 on Hopper; kernels/sm90/wgmma_fp8_gemm.hpp):
// route, the tokens quantised to e4m3 rows (one scale each, once per token) at their sorted rows, GEMM1
// (bf16 intermediate in plain order), the intermediate quantised the same way, GEMM2 (bf16 rows), combine.
#include "kernels/sm90/chunk_order.hpp"
#include "kernels/sm90/fp8_chunk_order.hpp"
#include "kernels/sm90/wgmma_fp8_gemm.hpp"
#include "moe/gpu_layer.hpp"
#include "routing/routing.hpp"

namespace mxmoe {

void run_wgmma_fp8(const GpuLayer& layer, const plan::Plan& p, const ForwardArgs& f) {
  const MoeConfig& c = layer.config;
  const BoundWorkspace& ws = f.ws;
  const int rows = mma::block_m(p.m_tiles);
  routing::route_and_permute(c, f.route, f.tokens, ws.routing, f.stream);
  if (f.stages < 2) return;
  const int64_t pairs = f.tokens * c.top_k;
  const int32_t* live_rows = ws.routing.expert_offsets + c.num_experts;  // dropped pairs make fewer rows
  // The MX buffers hold the e4m3 rows and their scales (gpu_backend.cpp sizes them for this family).
  auto* scales1 = reinterpret_cast<float*>(ws.mx_scales);
  auto* scales2 = reinterpret_cast<float*>(ws.mx_scales2);
  sm90::quantize_tokens_e4m3(f.hidden, c.hidden, ws.mx_codes, scales1, f.tokens, c.hidden, ws.routing.pair_row, c.top_k,
                             f.stream);
  mma::MmaArgs a;
  layer.bind_routing(a, ws);
  layer.bind_weights(a, true);
  a.act = reinterpret_cast<const uint16_t*>(ws.mx_codes);
  a.k = static_cast<int>(sm90::padded_k(c.hidden));  // bytes per e4m3 row
  a.out = ws.intermediate;
  sm90::launch_wgmma_fp8<true>(a, {layer.w1.row_exponents.get<int8_t>(), scales1}, f.tokens, p.max_active, rows,
                               p.ksplit1, f.stream);
  if (f.stages < 3) return;
  const int64_t pitch = sm90::padded_k(c.intermediate);
  sm90::quantize_rows_e4m3(static_cast<const uint16_t*>(ws.intermediate), pitch, ws.mx_codes2, scales2, pairs,
                           c.intermediate, f.stream, live_rows);
  layer.bind_weights(a, false);
  a.act = reinterpret_cast<const uint16_t*>(ws.mx_codes2);
  a.k = static_cast<int>(pitch);
  a.out = ws.expert_rows;
  sm90::launch_wgmma_fp8<false>(a, {layer.w2.row_exponents.get<int8_t>(), scales2}, f.tokens, p.max_active, rows,
                                p.ksplit2, f.stream);
  if (f.stages < 4) return;
  combine_expert_rows(layer, f, true);  // GEMM2 writes bf16 rows
}

}  // namespace mxmoe
