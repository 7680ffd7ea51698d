// The workspace of a GPU forward (workspace.hpp): which buffers a plan's kernels read and write, sized
// for up to T tokens. A pure function of the planner's input, so the CPU tests check it for every target.
#include "moe/workspace.hpp"

#include <algorithm>

#include "kernels/mma/mma_gemm.hpp"
#include "kernels/sm90/chunk_order.hpp"
#include "mxmoe/runner.hpp"
#include "plan/planner.hpp"
#include "routing/expand.hpp"

namespace mxmoe {

bool runs_w4a8(const plan::PlannerInput& in) {
  return in.precision == Precision::Fp8 && !backend_uses_mxfp8(in.backend);
}

WorkspaceLayout workspace_layout(const plan::PlannerInput& in, int64_t tokens) {
  const MoeConfig& c = in.config;
  const bool mx_mode = backend_uses_mxfp8(in.backend), w4a8 = runs_w4a8(in);
  const bool expand_intermediate = in.force.mx_expand_intermediate.value_or(false);
  MxBufferBytes mx;
  if (mx_mode) {
    const int64_t pairs = tokens * c.top_k;
    const int64_t slots = std::min<int64_t>(c.num_experts, pairs);
    // The second expand (mx_expand_intermediate) reuses GEMM1's input buffer for K = I.
    const int k = expand_intermediate ? std::max(c.hidden, c.intermediate) : c.hidden;
    mx.codes = static_cast<size_t>(routing::expand_code_bytes(pairs, slots, k));
    mx.scales = static_cast<size_t>(routing::expand_scale_bytes(pairs, slots, k));
    if (!expand_intermediate) {
      mx.codes2 = static_cast<size_t>(routing::expand_code_bytes(pairs, slots, c.intermediate));
      mx.scales2 = static_cast<size_t>(routing::expand_scale_bytes(pairs, slots, c.intermediate));
    }
  }
  if (w4a8) {  // the e4m3 rows of both GEMMs' inputs, rows padded to whole chunks; GEMM1's a scale each
    const auto pairs = static_cast<size_t>(tokens * c.top_k);
    mx.codes = pairs * static_cast<size_t>(sm90::padded_k(c.hidden));
    mx.codes2 = pairs * static_cast<size_t>(sm90::padded_k(c.intermediate));
    mx.scales = pairs * sizeof(float);
  }
  // The fp32 intermediate only exists for the second expand; the MXFP8 epilogue skips it, and the W4A8
  // GEMM1 writes GEMM2's e4m3 rows instead.
  const size_t intermediate_bytes = w4a8 ? 0 : !mx_mode ? 2 : expand_intermediate ? 4 : 0;
  // The swap-AB tiles read a permuted copy of the hidden states, the wgmma tiles the tokens expanded to
  // their rows and an intermediate with rows padded to whole chunks. The W4A8 tiles (the only family
  // planned at fp8) read neither: their e4m3 rows are the MX buffers above.
  const bool permute_hidden = !w4a8 && (in.backend == Backend::Auto || in.backend == Backend::Mma) && in.fits.mma &&
                              (mma::swap_supported(4) || in.fits.wgmma);
  return WorkspaceLayout(c, tokens, mx, intermediate_bytes, permute_hidden);
}

}  // namespace mxmoe
