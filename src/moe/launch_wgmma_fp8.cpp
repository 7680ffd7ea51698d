// The W4A8 wgmma family's launch sequence (Precision::Fp8 on Hopper; kernels/sm90/wgmma_fp8_gemm.hpp):
// route, the tokens quantised to e4m3 rows (one scale each, once per token) at their sorted rows, GEMM1
// (its epilogue writes GEMM2's e4m3 input at the SwiGLU bound's static scale), GEMM2 (bf16 rows), combine.
#include "kernels/sm90/chunk_order.hpp"
#include "kernels/sm90/fp8_chunk_order.hpp"
#include "kernels/sm90/wgmma_fp8_gemm.hpp"
#include "moe/gpu_layer.hpp"
#include "reference/fp8_model.hpp"
#include "routing/routing.hpp"

namespace mxmoe {

void run_wgmma_fp8(const GpuLayer& layer, const plan::Plan& p, const ForwardArgs& f) {
  const MoeConfig& c = layer.config;
  const BoundWorkspace& ws = f.ws;
  const int rows = mma::block_m(p.m_tiles);
  routing::route_and_permute(c, f.route, f.tokens, ws.routing, f.stream);
  if (f.stages < 2) return;
  // The MX buffers hold the e4m3 rows: the tokens' (with their scales) and GEMM1's output (gpu_backend.cpp
  // sizes them for this family).
  auto* scales1 = reinterpret_cast<float*>(ws.mx_scales);
  sm90::quantize_tokens_e4m3(f.hidden, c.hidden, ws.mx_codes, scales1, f.tokens, c.hidden, ws.routing.pair_row, c.top_k,
                             f.stream);
  const float gemm2_scale = fp8::gemm2_input_scale(c.swiglu_alpha, c.swiglu_limit);  // > 0: MoeRunner checked
  mma::MmaArgs a;
  layer.bind_routing(a, ws);
  layer.bind_weights(a, true);
  a.act = reinterpret_cast<const uint16_t*>(ws.mx_codes);
  a.k = static_cast<int>(sm90::padded_k(c.hidden));  // bytes per e4m3 row
  a.out = ws.mx_codes2;
  sm90::Fp8Operands gemm1{layer.w1.row_exponents.get<int8_t>(), scales1};
  gemm1.out_scale = gemm2_scale;
  sm90::launch_wgmma_fp8<true>(a, gemm1, f.tokens, p.max_active, rows, p.ksplit1, f.stream);
  if (f.stages < 3) return;
  layer.bind_weights(a, false);
  a.act = reinterpret_cast<const uint16_t*>(ws.mx_codes2);
  a.k = static_cast<int>(sm90::padded_k(c.intermediate));
  a.out = ws.expert_rows;
  sm90::Fp8Operands gemm2{layer.w2.row_exponents.get<int8_t>()};
  gemm2.act_scale = 1.f / gemm2_scale;  // exact: a power of two
  sm90::launch_wgmma_fp8<false>(a, gemm2, f.tokens, p.max_active, rows, p.ksplit2, f.stream);
  if (f.stages < 4) return;
  combine_expert_rows(layer, f, true);  // GEMM2 writes bf16 rows
}

}  // namespace mxmoe
