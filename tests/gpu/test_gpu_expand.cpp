// The MXFP8 expand (routing/expand.hpp) against the CPU formats and scale-layout code, byte for
// byte: experts with 0, 1, 127, 128 and 129 rows, K not a multiple of 128, both scale rules, the
// gathered (GEMM1) and the in-order (GEMM2) row sources, and blocks of zeros, -0, tiny and huge
// values, inf and NaN. Skips itself without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>

#include "gpu/gpu_test_support.hpp"
#include "moe/workspace.hpp"
#include "routing/expand.hpp"
#include "routing/routing.hpp"

namespace mxmoe::test {
namespace {

// Tokens routed (top-1) so that expert e receives rows_per_expert[e] of them, in a shuffled order.
std::vector<float> logits_for_counts(const std::vector<int>& rows_per_expert, std::mt19937_64& rng) {
  std::vector<int> owner;
  for (size_t e = 0; e < rows_per_expert.size(); ++e) owner.insert(owner.end(), rows_per_expert[e], static_cast<int>(e));
  std::shuffle(owner.begin(), owner.end(), rng);
  const int experts = static_cast<int>(rows_per_expert.size());
  std::normal_distribution<float> noise(0.f, 1.f);
  std::vector<float> logits(owner.size() * experts);
  for (size_t t = 0; t < owner.size(); ++t)
    for (int e = 0; e < experts; ++e) logits[t * experts + e] = noise(rng) + (e == owner[t] ? 20.f : 0.f);
  return logits;
}

// Some blocks of the activations replaced by the values the rules must treat specially.
void plant_special_blocks(std::vector<uint16_t>& act, int k) {
  const int blocks = static_cast<int>(act.size()) / 32;
  auto fill = [&](int b, auto value_of) {
    for (int i = 0; i < 32; ++i) act[static_cast<size_t>(b) * 32 + i] = value_of(i);
  };
  fill(0 % blocks, [](int) { return uint16_t{0x0000}; });                                  // all +0
  fill(3 % blocks, [](int i) { return uint16_t(i % 2 ? 0x8000 : 0x0000); });               // +-0
  fill(7 % blocks, [](int i) { return uint16_t(0x0001 + i); });                            // bf16 subnormals
  fill(11 % blocks, [](int i) { return uint16_t(0x7F7F - (i % 3)); });                     // near the bf16 max
  fill(13 % blocks, [](int i) { return uint16_t(i == 5 ? 0x7F80 : 0x3F80); });             // +inf
  fill(17 % blocks, [](int i) { return uint16_t(i == 9 ? 0xFFC1 : 0xBF80); });             // NaN
  fill(19 % blocks, [](int i) { return uint16_t(i == 0 ? 0x43E0 : 0x3C00 + i); });         // amax 448: scale 2^0
  fill(23 % blocks, [](int i) { return uint16_t(i == 0 ? 0x43E1 : 0x0400 + 7 * i); });     // just above 448, tiny rest
  fill(29 % blocks, [](int i) { return uint16_t(i == 0 ? 0x3F80 : 0x8001 + i); });         // 1, then negatives -> -0
  (void)k;
}

struct ExpandCase {
  const char* name;
  std::vector<int> rows;  // per expert (top-1)
  int k;
  ScaleRule rule;
  bool gather;
  bool f32 = false;  // fp32 input (the MX path's intermediate), with full 24-bit significands
};

class GpuExpand : public ::testing::TestWithParam<ExpandCase> {};

TEST_P(GpuExpand, MatchesCpuQuantisationAndScaleLayoutByteForByte) {
  MXMOE_SKIP_WITHOUT_GPU();
  const ExpandCase c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  MoeConfig cfg;
  cfg.num_experts = static_cast<int>(c.rows.size());
  cfg.top_k = 1;
  cfg.hidden = c.k;
  cfg.intermediate = c.k;
  const int64_t tokens = std::accumulate(c.rows.begin(), c.rows.end(), int64_t{0});
  const auto logits = logits_for_counts(c.rows, rng);
  const int kblocks = c.k / 32;

  // Routing on the device (the expand's input), checked against the intended counts.
  const WorkspaceLayout layout(cfg, tokens);
  DeviceBuffer ws(layout.total);
  MXMOE_CUDA_CHECK(cudaMemset(ws.get(), 0xFF, ws.bytes()));
  const auto bound = layout.bind(ws.get());
  const DeviceBuffer d_logits = to_device(logits);
  routing::route_and_permute(cfg, d_logits.get<float>(), tokens, bound.routing, nullptr);
  std::vector<int32_t> row_pair(static_cast<size_t>(tokens));
  MXMOE_CUDA_CHECK(cudaMemcpy(row_pair.data(), bound.routing.row_pair, row_pair.size() * 4, cudaMemcpyDeviceToHost));

  // The activations: tokens' rows (gather) or already sorted rows.
  auto act = random_hidden(tokens, c.k, rng);
  plant_special_blocks(act, c.k);
  // The values as floats; fp32 input also gets random low significand bits (not bf16-representable).
  std::vector<float> act_f(act.size());
  for (size_t i = 0; i < act.size(); ++i) {
    act_f[i] = bf16_to_float(act[i]);
    if (c.f32 && std::isfinite(act_f[i]) && act_f[i] != 0.f && std::fabs(act_f[i]) > 1e-30f)
      act_f[i] = std::bit_cast<float>(std::bit_cast<uint32_t>(act_f[i]) | static_cast<uint32_t>(rng() & 0xFFFF));
  }
  const DeviceBuffer d_act = c.f32 ? to_device(act_f) : to_device(act);
  const int max_active = static_cast<int>(std::min<int64_t>(cfg.num_experts, tokens));
  const int64_t code_bytes = routing::expand_code_bytes(tokens, max_active, c.k);
  const int64_t scale_bytes = routing::expand_scale_bytes(tokens, max_active, c.k);
  DeviceBuffer d_codes(static_cast<size_t>(code_bytes)), d_scales(static_cast<size_t>(scale_bytes));
  MXMOE_CUDA_CHECK(cudaMemset(d_codes.get(), 0xAB, d_codes.bytes()));  // poison: every byte read must be written
  MXMOE_CUDA_CHECK(cudaMemset(d_scales.get(), 0xAB, d_scales.bytes()));
  routing::ExpandArgs a;
  a.act = d_act.get();
  a.f32 = c.f32;
  a.gather = c.gather;
  a.k = c.k;
  a.top_k = 1;
  a.experts = cfg.num_experts;
  a.rule = c.rule;
  a.codes = d_codes.get<uint8_t>();
  a.scales = d_scales.get<uint8_t>();
  routing::expand_mxfp8(a, bound.routing, tokens, max_active, nullptr);
  MXMOE_CUDA_CHECK(cudaDeviceSynchronize());
  const auto codes = to_host<uint8_t>(d_codes, d_codes.bytes());
  const auto scales = to_host<uint8_t>(d_scales, d_scales.bytes());

  // Expected: the active experts' rows, each expert padded to 128 rows, quantised on the CPU.
  std::vector<int64_t> padded;
  for (const int r : c.rows)
    if (r > 0) padded.push_back(padded_scale_rows(r));
  const std::vector<int64_t> scale_offsets = grouped_scale_offsets(padded, kblocks);
  int64_t sorted_row = 0, padded_row = 0;
  size_t group = 0;
  for (size_t e = 0; e < c.rows.size(); ++e) {
    const int rows = c.rows[e];
    if (rows == 0) continue;
    SCOPED_TRACE("expert " + std::to_string(e) + " with " + std::to_string(rows) + " rows");
    std::vector<uint8_t> plain(static_cast<size_t>(rows) * kblocks);
    for (int r = 0; r < padded_scale_rows(rows); ++r) {
      const uint8_t* got = codes.data() + (padded_row + r) * c.k;
      if (r >= rows) {
        ASSERT_TRUE(std::all_of(got, got + c.k, [](uint8_t b) { return b == 0; })) << "padding row " << r << " not zero";
        continue;
      }
      const int64_t src = c.gather ? row_pair[static_cast<size_t>(sorted_row + r)] : sorted_row + r;
      std::vector<float> x(static_cast<size_t>(c.k));
      for (int i = 0; i < c.k; ++i) x[i] = act_f[static_cast<size_t>(src * c.k + i)];
      std::vector<uint8_t> want(static_cast<size_t>(c.k));
      mxfp8_quantize(x, c.rule, want, std::span(plain).subspan(static_cast<size_t>(r) * kblocks, kblocks));
      for (int i = 0; i < c.k; ++i)
        ASSERT_EQ(got[i], want[i]) << "row " << r << " element " << i << " (value " << x[i] << ")";
    }
    std::vector<uint8_t> want_scales(static_cast<size_t>(swizzled_scale_bytes(rows, kblocks)));
    swizzle_scales(plain, rows, kblocks, want_scales);
    ASSERT_EQ(scale_offsets[group + 1] - scale_offsets[group], static_cast<int64_t>(want_scales.size()));
    const std::vector<uint8_t> got_scales(scales.begin() + scale_offsets[group],
                                          scales.begin() + scale_offsets[group] + static_cast<int64_t>(want_scales.size()));
    ASSERT_EQ(got_scales, want_scales) << "swizzled scales (padding included)";
    sorted_row += rows;
    padded_row += padded_scale_rows(rows);
    ++group;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, GpuExpand,
    ::testing::Values(ExpandCase{"edges_rceil_gather", {0, 1, 127, 128, 129, 3, 0, 2}, 160, ScaleRule::Rceil, true},
                      ExpandCase{"edges_floor_gather", {0, 1, 127, 128, 129, 3, 0, 2}, 160, ScaleRule::Floor, true},
                      ExpandCase{"edges_rceil_rows", {129, 0, 1, 128, 127}, 2880, ScaleRule::Rceil, false},
                      ExpandCase{"one_expert_floor", {0, 0, 300, 0}, 96, ScaleRule::Floor, true},
                      ExpandCase{"single_row", {0, 1}, 32, ScaleRule::Rceil, true},
                      ExpandCase{"f32_rceil_rows", {129, 0, 1, 128, 127}, 160, ScaleRule::Rceil, false, true},
                      ExpandCase{"f32_floor_rows", {3, 64, 0, 200}, 2880, ScaleRule::Floor, false, true}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(GpuExpandErrors, RejectsBadK) {
  MXMOE_SKIP_WITHOUT_GPU();
  routing::ExpandArgs a;
  a.k = 48;
  expect_error_naming([&] { routing::expand_mxfp8(a, routing::RoutingBuffers{}, 1, 1, nullptr); }, "k must be");
}

TEST(GpuExpandErrors, RejectsNoExperts) {
  MXMOE_SKIP_WITHOUT_GPU();
  routing::ExpandArgs a;
  a.k = 64;
  expect_error_naming([&] { routing::expand_mxfp8(a, routing::RoutingBuffers{}, 1, 1, nullptr); }, "experts must be");
}

}  // namespace
}  // namespace mxmoe::test
