// The wgmma tiles' activation expand (kernels/sm90/chunk_order.hpp) against the CPU placement
// (row_position), bit for bit, into a poisoned output: K a multiple of 128, K % 128 == 64 (the half
// chunk), 32 and 96; 0, 1, 3 and 1000 rows; in row order and gathered through a routing's row_pair.
// Skips itself without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "gpu/gpu_test_support.hpp"
#include "kernels/sm90/chunk_order.hpp"

namespace mxmoe::test {
namespace {

struct ChunkOrderCase {
  int64_t rows;
  int k;
  int top_k;  // 0: rows in order (no row_pair)
};

class GpuChunkOrder : public ::testing::TestWithParam<ChunkOrderCase> {};

TEST_P(GpuChunkOrder, PlacesEveryElementAsTheCpuLayoutSays) {
  MXMOE_SKIP_WITHOUT_GPU();
  const ChunkOrderCase c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const bool gather = c.top_k > 0;
  const int top_k = gather ? c.top_k : 1;
  // Gathered: rows are pairs (token, slot) in a shuffled order, each reading its token's row.
  const int64_t sources = gather ? (c.rows + top_k - 1) / top_k : c.rows;
  std::vector<uint16_t> in(static_cast<size_t>(std::max<int64_t>(sources, 1) * c.k));
  for (auto& x : in) x = static_cast<uint16_t>(rng());  // every bit pattern: the expand only moves bits
  std::vector<int32_t> row_pair(static_cast<size_t>(std::max<int64_t>(c.rows, 1)));
  std::iota(row_pair.begin(), row_pair.end(), 0);
  std::shuffle(row_pair.begin(), row_pair.begin() + c.rows, rng);

  const int64_t pitch = sm90::padded_k(c.k);
  std::vector<uint16_t> expected(static_cast<size_t>(c.rows * pitch), 0);  // padding: zeros
  for (int64_t r = 0; r < c.rows; ++r) {
    const int64_t source = gather ? row_pair[r] / top_k : r;
    for (int kk = 0; kk < c.k; ++kk) expected[r * pitch + sm90::row_position(kk, c.k)] = in[source * c.k + kk];
  }

  const DeviceBuffer d_in = to_device(in);
  const DeviceBuffer d_pairs = to_device(row_pair);
  DeviceBuffer d_out(static_cast<size_t>(std::max<int64_t>(c.rows * pitch, 8)) * 2);
  MXMOE_CUDA_CHECK(cudaMemset(d_out.get(), 0xAB, d_out.bytes()));  // poison: every element must be written
  sm90::to_chunk_order(d_in.get<uint16_t>(), d_out.get<uint16_t>(), c.rows, c.k, nullptr,
                       gather ? d_pairs.get<int32_t>() : nullptr, top_k);
  MXMOE_CUDA_CHECK(cudaDeviceSynchronize());
  const auto out = to_host<uint16_t>(d_out, static_cast<size_t>(c.rows * pitch));
  int64_t wrong = 0, first = -1;
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i] != expected[i] && wrong++ == 0) first = static_cast<int64_t>(i);
  EXPECT_EQ(wrong, 0) << "first at row " << (first < 0 ? -1 : first / pitch) << ", stored element "
                      << (first < 0 ? -1 : first % pitch);
  if (c.rows == 0) {  // nothing written
    const auto untouched = to_host<uint16_t>(d_out, 8);
    for (uint16_t v : untouched) EXPECT_EQ(v, 0xABABu);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GpuChunkOrder,
                         ::testing::Values(ChunkOrderCase{0, 2880, 4}, ChunkOrderCase{1, 2880, 4},
                                           ChunkOrderCase{3, 2880, 0}, ChunkOrderCase{1000, 2880, 4},
                                           ChunkOrderCase{1000, 2880, 0}, ChunkOrderCase{37, 256, 2},
                                           ChunkOrderCase{37, 64, 0}, ChunkOrderCase{33, 32, 1},
                                           ChunkOrderCase{129, 96, 4}, ChunkOrderCase{5, 160, 0},
                                           ChunkOrderCase{70, 4224, 8}),
                         [](const auto& info) {
                           const ChunkOrderCase& c = info.param;
                           return "rows" + std::to_string(c.rows) + "_k" + std::to_string(c.k) +
                                  (c.top_k ? "_gather" + std::to_string(c.top_k) : "_in_order");
                         });

TEST(GpuChunkOrderErrors, RejectsBadArguments) {
  MXMOE_SKIP_WITHOUT_GPU();
  DeviceBuffer buf(4096);
  auto* p = buf.get<uint16_t>();
  expect_error_naming([&] { sm90::to_chunk_order(p, p + 1024, 1, 0, nullptr); }, "k must be");
  expect_error_naming([&] { sm90::to_chunk_order(p, p + 1024, -1, 32, nullptr); }, "rows must");
  expect_error_naming([&] { sm90::to_chunk_order(p, p + 1025, 1, 32, nullptr); }, "aligned");
  expect_error_naming([&] { sm90::to_chunk_order(p, p + 1024, 1, 32, nullptr, nullptr, 0); }, "top_k must");
}

}  // namespace
}  // namespace mxmoe::test
