// quantize_tokens_e4m3 (kernels/sm90/fp8_chunk_order.hpp) against fp8::row_round_trip, bit for bit: each
// row's scale, and each element's code float_to_e4m3(x / scale) at its fp8_row_position (zeros past K;
// 0x7F for a row with a NaN or inf; zeros for a zero row), into a poisoned output; tokens (with a row
// pitch past k, or none) written to their sorted rows through a routing's pair_row with dropped pairs.
// Skips itself without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "gpu/gpu_test_support.hpp"
#include "kernels/sm90/fp8_chunk_order.hpp"
#include "reference/fp8_model.hpp"

namespace mxmoe::test {
namespace {

struct QuantizeCase {
  int64_t rows;
  int k;
  int top_k;
  int extra_pitch = 0;  // the input's row pitch past k
};

class GpuFp8Quantize : public ::testing::TestWithParam<QuantizeCase> {};

TEST_P(GpuFp8Quantize, CodesAndScalesAreTheModelsBitForBit) {
  MXMOE_SKIP_WITHOUT_GPU();
  const QuantizeCase c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int top_k = c.top_k;
  const int64_t sources = (c.rows + top_k - 1) / top_k;
  const int64_t in_pitch = c.k + c.extra_pitch;
  std::vector<uint16_t> in(static_cast<size_t>(std::max<int64_t>(sources, 1) * in_pitch), 0xFFFF);  // NaN past k
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int64_t s = 0; s < sources; ++s) {
    // Magnitudes from tiny (bf16 subnormal territory) to large, a few special rows.
    const float gain = std::ldexp(1.f, static_cast<int>(rng() % 60) - 40);
    for (int kk = 0; kk < c.k; ++kk) in[s * in_pitch + kk] = float_to_bf16(normal(rng) * gain);
    const int kind = static_cast<int>(s % 23);
    if (kind == 5) std::fill_n(in.begin() + s * in_pitch, c.k, uint16_t{0});                 // zero row
    if (kind == 6) std::fill_n(in.begin() + s * in_pitch, c.k, uint16_t{0x8000});            // -0 row
    if (kind == 7) in[s * in_pitch + rng() % c.k] = 0x7FC0;                                   // NaN
    if (kind == 8) in[s * in_pitch + rng() % c.k] = 0xFF80;                                   // -inf
    if (kind == 9) in[s * in_pitch + rng() % c.k] = float_to_bf16(3e38f);                     // huge, finite
  }
  // Sorted row r holds pair row_pair[r]; the pairs of sorted rows from `live` on are dropped (-1 in
  // pair_row, the tokens' view).
  std::vector<int32_t> row_pair(static_cast<size_t>(std::max<int64_t>(c.rows, 1)));
  std::iota(row_pair.begin(), row_pair.end(), 0);
  std::shuffle(row_pair.begin(), row_pair.begin() + c.rows, rng);
  const int32_t live = static_cast<int32_t>(c.rows - c.rows / 5);
  std::vector<int32_t> pair_row(static_cast<size_t>(std::max<int64_t>(sources * top_k, 1)), -1);
  for (int32_t r = 0; r < live; ++r) pair_row[row_pair[r]] = r;

  const int64_t pitch = sm90::padded_k(c.k);
  std::vector<uint8_t> expected(static_cast<size_t>(c.rows * pitch), 0xAB);  // rows past live: untouched
  std::vector<uint32_t> expected_scales(static_cast<size_t>(std::max<int64_t>(c.rows, 1)), 0xABABABABu);
  for (int64_t r = 0; r < live; ++r) {
    const int64_t source = row_pair[r] / top_k;
    std::vector<float> x(static_cast<size_t>(c.k));
    for (int kk = 0; kk < c.k; ++kk) x[kk] = bf16_to_float(in[source * in_pitch + kk]);
    const std::vector<float> original = x;
    const float scale = fp8::row_round_trip(x);
    std::memcpy(&expected_scales[r], &scale, 4);
    for (int64_t e = 0; e < pitch; ++e) {
      uint8_t code = 0;
      if (e < c.k) code = std::isnan(scale) ? 0x7F : scale == 0.f ? 0 : float_to_e4m3(original[e] / scale);
      expected[r * pitch + sm90::fp8_row_position(e)] = code;
    }
  }

  const DeviceBuffer d_in = to_device(in);
  const DeviceBuffer d_pairs = to_device(pair_row);
  DeviceBuffer d_out(static_cast<size_t>(std::max<int64_t>(c.rows * pitch, 16)));
  DeviceBuffer d_scales(static_cast<size_t>(std::max<int64_t>(c.rows, 1)) * 4);
  MXMOE_CUDA_CHECK(cudaMemset(d_out.get(), 0xAB, d_out.bytes()));
  MXMOE_CUDA_CHECK(cudaMemset(d_scales.get(), 0xAB, d_scales.bytes()));
  sm90::quantize_tokens_e4m3(d_in.get<uint16_t>(), in_pitch, d_out.get<uint8_t>(), d_scales.get<float>(), sources, c.k,
                             d_pairs.get<int32_t>(), top_k, nullptr);
  MXMOE_CUDA_CHECK(cudaDeviceSynchronize());
  const auto out = to_host<uint8_t>(d_out, static_cast<size_t>(c.rows * pitch));
  const auto scales = to_host<uint32_t>(d_scales, static_cast<size_t>(c.rows));
  int64_t wrong = 0, first = -1;
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i] != expected[i] && wrong++ == 0) first = static_cast<int64_t>(i);
  EXPECT_EQ(wrong, 0) << "codes; first at row " << (first < 0 ? -1 : first / pitch) << ", stored byte "
                      << (first < 0 ? -1 : first % pitch) << ": " << (first < 0 ? 0 : int(out[first])) << " against "
                      << (first < 0 ? 0 : int(expected[first]));
  for (int64_t r = 0; r < c.rows; ++r) {
    float got, want;
    std::memcpy(&got, &scales[r], 4);
    std::memcpy(&want, &expected_scales[r], 4);
    if (std::isnan(want)) EXPECT_TRUE(std::isnan(got)) << "row " << r;
    else EXPECT_EQ(scales[r], expected_scales[r]) << "row " << r << ": " << got << " against " << want;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GpuFp8Quantize,
                         ::testing::Values(QuantizeCase{0, 2880, 4}, QuantizeCase{1, 2880, 4}, QuantizeCase{3, 2880, 1, 72},
                                           QuantizeCase{1000, 2880, 4}, QuantizeCase{1000, 2880, 1, 8},
                                           QuantizeCase{200, 2944, 2, 136}, QuantizeCase{200, 4160, 4},
                                           QuantizeCase{33, 32, 1}, QuantizeCase{129, 96, 4, 8}, QuantizeCase{70, 4224, 8}),
                         [](const auto& info) {
                           const QuantizeCase& c = info.param;
                           return "rows" + std::to_string(c.rows) + "_k" + std::to_string(c.k) + "_top" +
                                  std::to_string(c.top_k) + (c.extra_pitch ? "_pitch" : "");
                         });

TEST(GpuFp8QuantizeErrors, RejectsBadArguments) {
  MXMOE_SKIP_WITHOUT_GPU();
  DeviceBuffer buf(1 << 16);
  auto* in = buf.get<uint16_t>();
  auto* out = buf.get<uint8_t>() + 16384;
  auto* scales = reinterpret_cast<float*>(buf.get<uint8_t>() + 32768);
  int32_t* pair_row = reinterpret_cast<int32_t*>(buf.get<uint8_t>() + 49152);
  expect_error_naming([&] { sm90::quantize_tokens_e4m3(in, 64, out, scales, 1, 0, pair_row, 4, nullptr); }, "k must be");
  expect_error_naming([&] { sm90::quantize_tokens_e4m3(in, 64, out, scales, 1, 12, pair_row, 4, nullptr); }, "k must be");
  expect_error_naming([&] { sm90::quantize_tokens_e4m3(in, 64, out, scales, -1, 64, pair_row, 4, nullptr); },
                      "tokens must");
  expect_error_naming([&] { sm90::quantize_tokens_e4m3(in, 64, out + 1, scales, 1, 64, pair_row, 4, nullptr); },
                      "aligned");
  expect_error_naming([&] { sm90::quantize_tokens_e4m3(in, 64, out, scales, 1, 64, pair_row, 0, nullptr); }, "top_k must");
  expect_error_naming([&] { sm90::quantize_tokens_e4m3(in, 64, out, scales, 1, 64, pair_row, 9, nullptr); }, "top_k must");
  expect_error_naming([&] { sm90::quantize_tokens_e4m3(in, 64, out, scales, 1, 64, nullptr, 4, nullptr); }, "pair_row");
  expect_error_naming([&] { sm90::quantize_tokens_e4m3(in, 60, out, scales, 1, 64, pair_row, 4, nullptr); }, "in_pitch");
}

}  // namespace
}  // namespace mxmoe::test
