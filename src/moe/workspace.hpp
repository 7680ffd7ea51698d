#pragma once
// The GPU workspace: one caller-provided buffer carved into the routing arrays, the intermediate
// activations and the per-row expert outputs. Sizes depend only on the runner's planner input and T,
// and grow with T, so a buffer sized for max_tokens serves every smaller forward.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/gemv/gemv.hpp"
#include "kernels/sm90/chunk_order.hpp"
#include "mxmoe/config.hpp"
#include "routing/routing.hpp"

namespace mxmoe {
namespace plan {
struct PlannerInput;
}

struct BoundWorkspace {
  routing::RoutingBuffers routing;
  void* intermediate;      // [T*k, I] bf16 (fp32 for the MX backends)
  float* expert_rows;      // [T*k, H] fp32 (bf16 from the swap-AB and wgmma tiles), already times the routing weight
  int32_t* combine_counters;  // [gemv::combine_counters_needed(H)] the combine in GEMM2
  // The MX backends: GEMM1's MXFP8 input (the expand's output, routing/expand.hpp; reused for GEMM2's
  // when a second expand quantises the intermediate) and GEMM2's, written by GEMM1's MXFP8 epilogue.
  uint8_t* mx_codes;
  uint8_t* mx_scales;
  uint8_t* mx_codes2;
  uint8_t* mx_scales2;
  // The swap-AB tiles: hidden [T, H] bf16 with each 8-element word in the Bf16Atom's pair order
  // (mma/act_stage.cuh), GEMM1's input; the wgmma tiles: [T, padded H] in chunk order
  // (sm90/chunk_order.hpp). The intermediate's rows are then padded too.
  uint16_t* permuted_hidden;
  int32_t* expert_done;  // [E] GEMM1's blocks done per expert (mma::MmaArgs::expert_done) or per slot (gemv::GemvArgs::slot_done)
};

// The MX backends' MXFP8 buffers: GEMM1's input (K = H, or max(H, I) when the second expand reuses
// it) and GEMM2's (K = I, from GEMM1's epilogue).
struct MxBufferBytes {
  size_t codes = 0, scales = 0, codes2 = 0, scales2 = 0;
};

struct WorkspaceLayout {
  size_t expert_ids = 0, pair_weights = 0, expert_offsets = 0, active_experts = 0, active_count = 0, row_pair = 0,
         pair_row = 0, segment_counts = 0, intermediate = 0, expert_rows = 0, combine_counters = 0, mx_codes = 0,
         mx_scales = 0, mx_codes2 = 0, mx_scales2 = 0, permuted_hidden = 0, expert_done = 0, total = 0;

  // mx: the MX backends' MXFP8 buffers (0 otherwise); permute_hidden: room for the swap-AB tiles'
  // permuted copy of the hidden states and for the wgmma tiles' inputs (the tokens expanded to their
  // sorted rows, and the intermediate, rows padded to whole chunks of K).
  WorkspaceLayout(const MoeConfig& config, int64_t tokens, const MxBufferBytes& mx = {},
                  size_t intermediate_elem_bytes = 2, bool permute_hidden = false) {
    const auto pairs = static_cast<size_t>(tokens * config.top_k);
    const auto experts = static_cast<size_t>(config.num_experts);
    auto take = [this](size_t bytes) {
      const size_t at = total;
      total += (bytes + 255) / 256 * 256;
      return at;
    };
    expert_ids = take(pairs * 4);
    pair_weights = take(pairs * 4);
    expert_offsets = take((experts + 1) * 4);
    active_experts = take(experts * 4);
    active_count = take(4);
    row_pair = take(pairs * 4);
    pair_row = take(pairs * 4);
    segment_counts = take(static_cast<size_t>(routing::kMaxRouteSegments) * experts * 4);
    // permute_hidden: the intermediate's rows padded to whole chunks of K for the wgmma tiles
    // (sm90/chunk_order.hpp).
    const auto pad = [&](int64_t k) { return static_cast<size_t>(permute_hidden ? sm90::padded_k(k) : k); };
    intermediate = take(pairs * pad(config.intermediate) * intermediate_elem_bytes);
    // permute_hidden: it also holds the wgmma tiles' expanded GEMM1 input (bf16, rows padded) first.
    expert_rows = take(pairs * std::max(static_cast<size_t>(config.hidden) * 4, pad(config.hidden) * 2));
    combine_counters = take(static_cast<size_t>(gemv::combine_counters_needed(config.hidden)) * 4);
    mx_codes = take(mx.codes);
    mx_scales = take(mx.scales);
    mx_codes2 = take(mx.codes2);
    mx_scales2 = take(mx.scales2);
    // The swap-AB tiles' copy (unpadded: the wgmma tiles' expanded input sits in expert_rows).
    permuted_hidden = take(permute_hidden ? static_cast<size_t>(tokens) * static_cast<size_t>(config.hidden) * 2 : 0);
    expert_done = take(experts * 4);
  }

  BoundWorkspace bind(void* base) const {
    auto* b = static_cast<uint8_t*>(base);
    BoundWorkspace w{};
    w.routing.expert_ids = reinterpret_cast<int32_t*>(b + expert_ids);
    w.routing.pair_weights = reinterpret_cast<float*>(b + pair_weights);
    w.routing.expert_offsets = reinterpret_cast<int32_t*>(b + expert_offsets);
    w.routing.active_experts = reinterpret_cast<int32_t*>(b + active_experts);
    w.routing.active_count = reinterpret_cast<int32_t*>(b + active_count);
    w.routing.row_pair = reinterpret_cast<int32_t*>(b + row_pair);
    w.routing.pair_row = reinterpret_cast<int32_t*>(b + pair_row);
    w.routing.segment_counts = reinterpret_cast<int32_t*>(b + segment_counts);
    w.intermediate = b + intermediate;
    w.expert_rows = reinterpret_cast<float*>(b + expert_rows);
    w.combine_counters = reinterpret_cast<int32_t*>(b + combine_counters);
    w.mx_codes = b + mx_codes;
    w.mx_scales = b + mx_scales;
    w.mx_codes2 = b + mx_codes2;
    w.mx_scales2 = b + mx_scales2;
    w.permuted_hidden = reinterpret_cast<uint16_t*>(b + permuted_hidden);
    w.expert_done = reinterpret_cast<int32_t*>(b + expert_done);
    return w;
  }
};

// Whether a GPU forward under `in` runs the W4A8 wgmma tiles (Precision::Fp8 under a W4A16 backend: the
// planner plans only them, at every T; under an MX backend fp8 is its MXFP8 path, backend_uses_mxfp8).
bool runs_w4a8(const plan::PlannerInput& in);

// The workspace of a GPU forward of up to `tokens` tokens under `in`: its backend, precision, fits and
// forced plan decide which buffers exist and how large (GpuBackend carves exactly this).
WorkspaceLayout workspace_layout(const plan::PlannerInput& in, int64_t tokens);

}  // namespace mxmoe
