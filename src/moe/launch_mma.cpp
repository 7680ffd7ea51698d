// The tensor-core families' launch sequence (mma.sync tiles, plain or swap-AB, and Hopper's wgmma
// tiles): route, the activations in the order the tile reads them, GEMM1, GEMM2, combine.
#include "kernels/mma/mma_gemm.hpp"
#include "kernels/mma/permute_words.hpp"
#include "kernels/sm90/chunk_order.hpp"
#include "kernels/sm90/wgmma_gemm.hpp"
#include "moe/gpu_layer.hpp"
#include "routing/routing.hpp"

namespace mxmoe {

void run_mma(const GpuLayer& layer, const plan::Plan& p, const ForwardArgs& f) {
  const MoeConfig& c = layer.config;
  const BoundWorkspace& ws = f.ws;
  const bool wgmma = p.family == plan::Family::Wgmma;
  const int rows = mma::block_m(p.m_tiles);
  // The swap-AB tiles' GEMM2 starts each expert as GEMM1 finishes it, on counts the route zeroes.
  routing::RoutingBuffers routing_buffers = ws.routing;
  if (p.swap_ab) routing_buffers.zero_counts = ws.expert_done;
  routing::route_and_permute(c, f.route, f.tokens, routing_buffers, f.stream);
  if (f.stages < 2) return;
  mma::MmaArgs a;
  a.swap_ab = p.swap_ab;
  layer.bind_routing(a, ws);
  layer.bind_weights(a, true);
  a.wide_scales = layer.w1.wide_scales;
  a.act = f.hidden;
  if (wgmma) {
    // The wgmma tiles read their activations by tensor copies of whole m-tiles: in chunk order, rows
    // padded to whole chunks, GEMM1's tokens expanded to their sorted rows (in GEMM2's output buffer,
    // which GEMM2 only writes after GEMM1 has finished: the workspace layout sizes it so).
    auto* expanded = reinterpret_cast<uint16_t*>(ws.expert_rows);
    sm90::to_chunk_order(f.hidden, expanded, f.tokens * c.top_k, c.hidden, f.stream, ws.routing.row_pair, c.top_k,
                         ws.routing.expert_offsets + c.num_experts);
    a.act = expanded;
    a.half_tail = sm90::half_tail(c.hidden);
    a.k = static_cast<int>(sm90::padded_k(c.hidden));
  } else if (p.swap_ab) {  // the swap-AB tiles read their activations in the decode's pair order
    mma::permute_words(f.hidden, ws.permuted_hidden, f.tokens * c.hidden, f.stream);
    a.act = ws.permuted_hidden;
    a.expert_done = ws.expert_done;
  }
  a.out = ws.intermediate;
  if (wgmma) sm90::launch_wgmma<true>(a, f.tokens, p.max_active, rows, f.stream);
  else mma::launch_gemm1(a, f.tokens, p.max_active, p.m_tiles, f.stream);
  if (f.stages < 3) return;
  layer.bind_weights(a, false);
  a.wide_scales = layer.w2.wide_scales;
  a.act = static_cast<const uint16_t*>(ws.intermediate);  // GEMM1 wrote it in the order GEMM2 reads
  a.out = ws.expert_rows;
  if (wgmma) {
    a.half_tail = sm90::half_tail(c.intermediate);
    a.k = static_cast<int>(sm90::padded_k(c.intermediate));
    sm90::launch_wgmma<false>(a, f.tokens, p.max_active, rows, f.stream);
  } else {
    mma::launch_gemm2(a, f.tokens, p.max_active, p.m_tiles, f.stream);
  }
  if (f.stages < 4) return;
  // The swap-AB and wgmma tiles' GEMM2 writes bf16 rows (swap_epilogue.cuh), the others fp32.
  combine_expert_rows(layer, f, wgmma || p.swap_ab);
}

}  // namespace mxmoe
