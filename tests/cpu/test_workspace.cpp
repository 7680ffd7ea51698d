// The GPU workspace's layout (moe/workspace.hpp) for every target, backend and precision, on the CPU:
// each buffer a plan's kernels use is there and large enough, none the plan does not use is reserved,
// every buffer is 256-byte aligned, and the total grows with T (a workspace for max_tokens serves every
// smaller forward).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/sm90/chunk_order.hpp"
#include "moe/workspace.hpp"
#include "mxmoe/plan_override.hpp"
#include "planner_test_support.hpp"
#include "routing/expand.hpp"

namespace mxmoe {
namespace {

using plan::PlannerInput;

// Each buffer's bytes: the distance to the next offset, in the layout's order.
struct Sizes {
  size_t intermediate, expert_rows, mx_codes, mx_scales, mx_codes2, mx_scales2, permuted_hidden;
};
Sizes sizes_of(const WorkspaceLayout& w) {
  return {w.expert_rows - w.intermediate, w.combine_counters - w.expert_rows, w.mx_scales - w.mx_codes,
          w.mx_codes2 - w.mx_scales,      w.mx_scales2 - w.mx_codes2,        w.permuted_hidden - w.mx_scales2,
          w.expert_done - w.permuted_hidden};
}

PlannerInput input(const std::string& target, const std::string& model, Backend backend, Precision precision) {
  PlannerInput in = plan::input_for(target, MoeConfig::preset(model), backend);
  in.precision = precision;
  return in;
}

constexpr int64_t kTokens[] = {1, 3, 64, 1000, 4096};

// fp8 on Hopper: GEMM1's and GEMM2's e4m3 rows (rows padded to whole chunks) and GEMM1's row scales; no
// bf16 intermediate, no permuted copy of the hidden states, no second scale buffer.
TEST(Workspace, W4a8HoldsItsE4m3RowsAndNothingItDoesNotRead) {
  for (const std::string model : {"gpt-oss-20b", "gpt-oss-120b"})
    for (const std::string target : {"h100", "h200"})
      for (const int64_t t : kTokens) {
        const PlannerInput in = input(target, model, Backend::Auto, Precision::Fp8);
        ASSERT_TRUE(runs_w4a8(in));
        const MoeConfig& c = in.config;
        const auto pairs = static_cast<size_t>(t * c.top_k);
        const Sizes s = sizes_of(workspace_layout(in, t));
        const std::string at = model + " " + target + " T = " + std::to_string(t);
        EXPECT_EQ(s.intermediate, 0u) << at;
        EXPECT_EQ(s.permuted_hidden, 0u) << at;
        EXPECT_EQ(s.mx_scales2, 0u) << at;
        EXPECT_GE(s.mx_codes, pairs * sm90::padded_k(c.hidden)) << at;
        EXPECT_LT(s.mx_codes, pairs * sm90::padded_k(c.hidden) + 256) << at;
        EXPECT_GE(s.mx_codes2, pairs * sm90::padded_k(c.intermediate)) << at;
        EXPECT_GE(s.mx_scales, pairs * 4) << at;
        EXPECT_GE(s.expert_rows, pairs * c.hidden * 2) << at;  // GEMM2's bf16 rows
        // The bf16 plans of the same target: the permuted copy and a padded bf16 intermediate, no MX buffers.
        const Sizes b = sizes_of(workspace_layout(input(target, model, Backend::Auto, Precision::Bf16), t));
        EXPECT_GE(b.permuted_hidden, static_cast<size_t>(t) * c.hidden * 2) << at;
        EXPECT_GE(b.intermediate, pairs * sm90::padded_k(c.intermediate) * 2) << at;
        EXPECT_EQ(b.mx_codes + b.mx_scales + b.mx_codes2 + b.mx_scales2, 0u) << at;
      }
}

// The MX backends (SM120/SM121's block-scaled path): the expand's MXFP8 rows and scales for GEMM1 and
// GEMM2 (GEMM1's epilogue writes GEMM2's); with the second expand, one pair of buffers for K = max(H, I)
// and an fp32 intermediate instead.
TEST(Workspace, MxBackendsHoldTheExpandsBuffers) {
  for (const std::string target : {"rtx5090", "gb10"})
    for (const Backend backend : {Backend::Mx, Backend::MxEmulated})
      for (const int64_t t : kTokens) {
        PlannerInput in = input(target, "gpt-oss-120b", backend, Precision::Bf16);
        ASSERT_TRUE(backend_uses_mxfp8(in.backend));
        const MoeConfig& c = in.config;
        const int64_t pairs = t * c.top_k, slots = std::min<int64_t>(c.num_experts, pairs);
        const std::string at = target + " T = " + std::to_string(t);
        Sizes s = sizes_of(workspace_layout(in, t));
        EXPECT_GE(s.mx_codes, static_cast<size_t>(routing::expand_code_bytes(pairs, slots, c.hidden))) << at;
        EXPECT_GE(s.mx_scales, static_cast<size_t>(routing::expand_scale_bytes(pairs, slots, c.hidden))) << at;
        EXPECT_GE(s.mx_codes2, static_cast<size_t>(routing::expand_code_bytes(pairs, slots, c.intermediate))) << at;
        EXPECT_GE(s.mx_scales2, static_cast<size_t>(routing::expand_scale_bytes(pairs, slots, c.intermediate))) << at;
        EXPECT_EQ(s.intermediate, 0u) << at;
        EXPECT_EQ(s.permuted_hidden, 0u) << at;
        in.force = parse_plan_override("mx_expand=1", "test");
        s = sizes_of(workspace_layout(in, t));
        const int k = std::max(c.hidden, c.intermediate);
        EXPECT_GE(s.mx_codes, static_cast<size_t>(routing::expand_code_bytes(pairs, slots, k))) << at;
        EXPECT_EQ(s.mx_codes2 + s.mx_scales2, 0u) << at;
        EXPECT_GE(s.intermediate, static_cast<size_t>(pairs) * c.intermediate * 4) << at;
      }
}

// Every buffer 256-byte aligned and in the layout's order; the total never shrinks as T grows.
TEST(Workspace, AlignedAndGrowsWithTokens) {
  struct Case {
    std::string target;
    Backend backend;
    Precision precision;
  };
  const std::vector<Case> cases = {{"h100", Backend::Auto, Precision::Bf16},   {"h200", Backend::Auto, Precision::Fp8},
                                   {"h200", Backend::Gemv, Precision::Bf16},   {"h200", Backend::Mma, Precision::Bf16},
                                   {"rtx5090", Backend::Auto, Precision::Bf16}, {"gb10", Backend::Mx, Precision::Bf16}};
  for (const std::string model : {"gpt-oss-20b", "gpt-oss-120b"})
    for (const Case& k : cases) {
      const PlannerInput in = input(k.target, model, k.backend, k.precision);
      size_t last = 0;
      for (const int64_t t : {0, 1, 2, 3, 4, 8, 64, 1000, 4096}) {
        const WorkspaceLayout w = workspace_layout(in, t);
        const std::string at = model + " " + k.target + " T = " + std::to_string(t);
        const size_t offsets[] = {w.expert_ids,     w.pair_weights, w.expert_offsets,   w.active_experts, w.active_count,
                                  w.row_pair,       w.pair_row,     w.segment_counts,   w.intermediate,   w.expert_rows,
                                  w.combine_counters, w.mx_codes,   w.mx_scales,        w.mx_codes2,      w.mx_scales2,
                                  w.permuted_hidden, w.expert_done, w.total};
        for (size_t i = 0; i < std::size(offsets); ++i) {
          EXPECT_EQ(offsets[i] % 256, 0u) << at << " buffer " << i;
          if (i > 0) EXPECT_GE(offsets[i], offsets[i - 1]) << at << " buffer " << i;
        }
        EXPECT_GE(w.total, last) << at;
        last = w.total;
      }
    }
}

}  // namespace
}  // namespace mxmoe
