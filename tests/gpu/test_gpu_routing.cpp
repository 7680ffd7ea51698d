// Device routing against the CPU reference: ids and weights per (token, slot), expert offsets,
// and the stable order (expert, then token, then slot). Skips itself without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "gpu/gpu_test_support.hpp"
#include "moe/workspace.hpp"
#include "routing/routing.hpp"

namespace mxmoe::test {
namespace {

struct RouteCase {
  int experts, top_k;
  int64_t tokens;
  RoutingOrder order;
  bool renormalize;
  bool ties;  // logits drawn from a few values, so ties are common
};

class GpuRouting : public ::testing::TestWithParam<RouteCase> {};

TEST_P(GpuRouting, MatchesReferenceAndOrderIsStable) {
  MXMOE_SKIP_WITHOUT_GPU();
  const RouteCase c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  MoeConfig cfg;
  cfg.num_experts = c.experts;
  cfg.top_k = c.top_k;
  cfg.hidden = 64;
  cfg.intermediate = 64;
  cfg.routing = c.order;
  cfg.renormalize = c.renormalize;
  auto logits = random_logits(c.tokens, c.experts, rng);
  if (c.ties)
    for (auto& x : logits) x = std::round(x);

  const WorkspaceLayout layout(cfg, c.tokens);
  DeviceBuffer ws(layout.total);
  MXMOE_CUDA_CHECK(cudaMemset(ws.get(), 0xFF, ws.bytes()));  // poison
  const auto bound = layout.bind(ws.get());
  const DeviceBuffer d_logits = to_device(logits);
  routing::route_and_permute(cfg, d_logits.get<float>(), c.tokens, bound.routing, nullptr);
  MXMOE_CUDA_CHECK(cudaDeviceSynchronize());

  const size_t pairs = static_cast<size_t>(c.tokens * c.top_k);
  auto fetch = [&](const void* p, size_t n) {
    std::vector<int32_t> v(n);
    if (n) MXMOE_CUDA_CHECK(cudaMemcpy(v.data(), p, n * 4, cudaMemcpyDeviceToHost));
    return v;
  };
  const auto ids = fetch(bound.routing.expert_ids, pairs);
  std::vector<float> weights(pairs);
  if (pairs) MXMOE_CUDA_CHECK(cudaMemcpy(weights.data(), bound.routing.pair_weights, pairs * 4, cudaMemcpyDeviceToHost));
  const auto offsets = fetch(bound.routing.expert_offsets, c.experts + 1);
  const auto row_pair = fetch(bound.routing.row_pair, pairs);
  const auto pair_row = fetch(bound.routing.pair_row, pairs);
  const auto active = fetch(bound.routing.active_experts, c.experts);
  const auto active_count = fetch(bound.routing.active_count, 1)[0];

  std::vector<int32_t> ref_ids(pairs);
  std::vector<float> ref_w(pairs);
  reference_route(cfg, logits, c.tokens, ref_ids, ref_w);
  ASSERT_EQ(ids, ref_ids);
  for (size_t p = 0; p < pairs; ++p) ASSERT_NEAR(weights[p], ref_w[p], 2e-6) << "pair " << p;

  // Offsets are the exclusive scan of the histogram; the active list is every expert with rows.
  std::vector<int32_t> count(c.experts, 0);
  for (auto e : ref_ids) ++count[e];
  int expect_active = 0;
  ASSERT_EQ(offsets[0], 0);
  for (int e = 0; e < c.experts; ++e) {
    ASSERT_EQ(offsets[e + 1] - offsets[e], count[e]) << "expert " << e;
    if (count[e] > 0) ASSERT_EQ(active[expect_active++], e);
  }
  ASSERT_EQ(active_count, expect_active);
  // Rows are sorted by (expert, pair index), and pair_row inverts row_pair.
  for (size_t r = 0; r < pairs; ++r) {
    ASSERT_EQ(pair_row[row_pair[r]], static_cast<int32_t>(r));
    if (r > 0) {
      const auto a = std::make_pair(ids[row_pair[r - 1]], row_pair[r - 1]);
      const auto b = std::make_pair(ids[row_pair[r]], row_pair[r]);
      ASSERT_LT(a, b) << "row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, GpuRouting,
                         ::testing::Values(RouteCase{32, 4, 1, RoutingOrder::TopkThenSoftmax, false, false},
                                           RouteCase{128, 4, 3, RoutingOrder::TopkThenSoftmax, false, true},
                                           RouteCase{128, 4, 1000, RoutingOrder::TopkThenSoftmax, false, true},
                                           RouteCase{256, 8, 4099, RoutingOrder::TopkThenSoftmax, false, false},
                                           RouteCase{60, 6, 517, RoutingOrder::SoftmaxThenTopk, true, false},
                                           RouteCase{60, 6, 517, RoutingOrder::SoftmaxThenTopk, false, true},
                                           RouteCase{4, 4, 33, RoutingOrder::TopkThenSoftmax, false, false},
                                           RouteCase{1, 1, 5, RoutingOrder::TopkThenSoftmax, false, false}));

// The selection rule on the values the random cases never draw: NaN is selected as if it were -inf,
// -0 and +0 tie (the lower id first), and ties among -inf and NaN also go to the lower id. The CPU
// reference rejects non-finite logits, so the expected ids come from that rule spelled out here.
TEST(GpuRouting, NanAsMinusInfAndSignedZerosTie) {
  MXMOE_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(fresh_seed());
  const int experts = 128, k = 4;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::normal_distribution<float> dist(-3.f, 1.f);
  std::vector<std::vector<float>> rows(6, std::vector<float>(experts));
  for (auto& x : rows[0]) x = rng() & 1 ? -0.f : 0.f;  // all zeros of both signs
  for (auto& x : rows[1]) x = -inf;                    // one finite, NaNs among -inf
  rows[1][3] = rows[1][70] = nan;
  rows[1][100] = 1.f;
  for (int e = 0; e < experts; ++e) rows[2][e] = e < 64 ? nan : dist(rng);  // NaN below every finite
  for (auto& x : rows[3]) x = -1.f - std::abs(dist(rng));                   // zeros of both signs on top
  rows[3][77] = -0.f;
  rows[3][12] = 0.f;
  rows[3][5] = -0.f;
  for (auto& x : rows[4]) x = nan;
  for (auto& x : rows[5]) x = dist(rng);  // +inf on top, a NaN where the largest finite would be
  rows[5][33] = inf;
  rows[5][97] = nan;

  MoeConfig cfg;
  cfg.num_experts = experts;
  cfg.top_k = k;
  cfg.hidden = 64;
  cfg.intermediate = 64;
  const int64_t tokens = static_cast<int64_t>(rows.size());
  std::vector<float> logits;
  for (const auto& r : rows) logits.insert(logits.end(), r.begin(), r.end());
  const WorkspaceLayout layout(cfg, tokens);
  DeviceBuffer ws(layout.total);
  MXMOE_CUDA_CHECK(cudaMemset(ws.get(), 0xFF, ws.bytes()));  // poison
  const auto bound = layout.bind(ws.get());
  const DeviceBuffer d_logits = to_device(logits);
  routing::route_and_permute(cfg, d_logits.get<float>(), tokens, bound.routing, nullptr);
  std::vector<int32_t> ids(static_cast<size_t>(tokens * k));
  MXMOE_CUDA_CHECK(cudaMemcpy(ids.data(), bound.routing.expert_ids, ids.size() * 4, cudaMemcpyDeviceToHost));

  for (int64_t t = 0; t < tokens; ++t) {
    auto key = [&](int e) {
      const float v = rows[t][e];
      return std::isnan(v) ? -inf : v;  // -0 == +0 as floats compare
    };
    std::vector<int> order(experts);
    for (int e = 0; e < experts; ++e) order[e] = e;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return key(a) > key(b); });
    for (int s = 0; s < k; ++s) EXPECT_EQ(ids[t * k + s], order[s]) << "token " << t << " slot " << s;
  }
}

// Both row formats (fp32; bf16 from the swap-AB and wgmma tiles): each token's k rows in slot order in fp32,
// rounded once to bf16, bit for bit; the output poisoned first.
TEST(GpuCombine, SumsSlotsInOrder) {
  MXMOE_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(fresh_seed());
  const int64_t tokens = 5;
  const int k = 3, hidden = 96;
  std::normal_distribution<float> dist;
  std::vector<float> rows(static_cast<size_t>(tokens * k * hidden));
  for (auto& x : rows) x = dist(rng);
  std::vector<uint16_t> rows_bf16(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) rows_bf16[i] = float_to_bf16(rows[i]);
  std::vector<int32_t> pair_row(static_cast<size_t>(tokens * k));
  for (size_t i = 0; i < pair_row.size(); ++i) pair_row[i] = static_cast<int32_t>((i * 7) % pair_row.size());
  const DeviceBuffer d_rows = to_device(rows), d_rows_bf16 = to_device(rows_bf16), d_map = to_device(pair_row);
  for (const bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16 rows" : "fp32 rows");
    DeviceBuffer d_out(static_cast<size_t>(tokens * hidden) * 2);
    ASSERT_EQ(cudaMemset(d_out.get(), 0xFF, static_cast<size_t>(tokens * hidden) * 2), cudaSuccess);
    if (bf16)
      routing::combine_bf16_rows(d_rows_bf16.get<uint16_t>(), d_map.get<int32_t>(), tokens, k, hidden,
                                 d_out.get<uint16_t>(), nullptr);
    else
      routing::combine_rows(d_rows.get<float>(), d_map.get<int32_t>(), tokens, k, hidden, d_out.get<uint16_t>(),
                            nullptr);
    const auto out = to_host<uint16_t>(d_out, static_cast<size_t>(tokens * hidden));
    for (int64_t t = 0; t < tokens; ++t)
      for (int n = 0; n < hidden; ++n) {
        float sum = 0.f;
        for (int s = 0; s < k; ++s) {
          const size_t i = static_cast<size_t>(pair_row[t * k + s] * hidden + n);
          sum += bf16 ? bf16_to_float(rows_bf16[i]) : rows[i];
        }
        ASSERT_EQ(out[static_cast<size_t>(t * hidden + n)], float_to_bf16(sum)) << t << "," << n;
      }
  }
}

}  // namespace
}  // namespace mxmoe::test
