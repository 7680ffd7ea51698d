// The weight upload's host side: parallel_for runs every item once and passes an item's exception on,
// and the experts packed in parallel are, byte for byte, each expert packed on its own.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "layout/gemv_layout.hpp"
#include "layout/expert_packing.hpp"
#include "layout/fp8_row_exponents.hpp"
#include "common/parallel_for.hpp"
#include "mxmoe/error.hpp"
#include "test_support.hpp"

namespace mxmoe {
namespace {

using mxmoe::test::fresh_seed;

TEST(ParallelFor, EveryItemRunsExactlyOnce) {
  for (const int64_t count : {0, 1, 3, 7, 1000})
    for (const unsigned threads : {0u, 1u, 2u, 3u, 16u}) {
      SCOPED_TRACE("count " + std::to_string(count) + ", threads " + std::to_string(threads));
      std::vector<std::atomic<int>> runs(static_cast<size_t>(count));
      parallel_for(count, [&](int64_t i) { runs[static_cast<size_t>(i)].fetch_add(1); }, threads);
      for (int64_t i = 0; i < count; ++i) ASSERT_EQ(runs[static_cast<size_t>(i)].load(), 1) << "item " << i;
    }
}

TEST(ParallelFor, AnItemsExceptionReachesTheCaller) {
  for (const unsigned threads : {1u, 4u}) {
    std::atomic<int> after{0};
    EXPECT_THROW(parallel_for(
                     1000,
                     [&](int64_t i) {
                       if (i == 5) throw std::runtime_error("item 5");
                       if (i > 900) after.fetch_add(1);
                     },
                     threads),
                 std::runtime_error);
    // The items left are skipped once one has thrown (one thread: all of them after item 5).
    if (threads == 1) EXPECT_EQ(after.load(), 0);
  }
}

struct Checkpoint {
  std::vector<uint8_t> blocks, scales;
};

Checkpoint random_checkpoint(int experts, int64_t rows, int64_t kblocks, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Checkpoint c;
  c.blocks.resize(static_cast<size_t>(experts * rows * kblocks * 16));
  c.scales.resize(static_cast<size_t>(experts * rows * kblocks));
  for (auto& b : c.blocks) b = static_cast<uint8_t>(rng());
  for (auto& s : c.scales) s = static_cast<uint8_t>(rng() % 255);
  return c;
}

TEST(ExpertPacking, ParallelGemvLayoutEqualsEachExpertPackedAlone) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // K = 2880 (22.5 chunks: a half chunk) and 96 (not a multiple of 128), SwiGLU pairs or not.
  for (const auto& [rows, kblocks, swiglu] : {std::tuple{64, 90, true}, std::tuple{48, 3, false}}) {
    const int experts = 7;
    const Checkpoint c = random_checkpoint(experts, rows, kblocks, seed + rows);
    const gemv::PackedShape shape = gemv::packed_shape(rows, kblocks);
    const auto expert_bytes = static_cast<size_t>(shape.bytes());
    // And a W4A8 layer's records, each expert with its own row exponents.
    std::vector<int8_t> exponents(static_cast<size_t>(experts * rows));
    layout::fp8_row_exponents(c.scales.data(), experts, rows, kblocks, exponents.data());
    for (const bool w4a8 : {false, true}) {
      std::vector<uint8_t> want(expert_bytes * experts, 0x5A);
      for (int e = 0; e < experts; ++e)
        gemv::pack_expert(c.blocks.data() + e * rows * kblocks * 16, c.scales.data() + e * rows * kblocks, shape,
                          swiglu, want.data() + e * expert_bytes, w4a8 ? exponents.data() + e * rows : nullptr);
      for (const unsigned threads : {1u, 3u, 0u}) {
        const HostBytes got = pack_gemv_experts(c.blocks, c.scales, experts, shape, swiglu, threads,
                                                w4a8 ? std::span<const int8_t>(exponents) : std::span<const int8_t>());
        ASSERT_EQ(got.size, want.size());
        EXPECT_TRUE(std::equal(want.begin(), want.end(), got.data.get())) << "threads " << threads << ", w4a8 " << w4a8;
      }
    }
  }
}

TEST(ExpertPacking, WrongSizesAreErrorsNamingTheTensor) {
  const Checkpoint c = random_checkpoint(2, 16, 2, 1);
  const gemv::PackedShape shape = gemv::packed_shape(16, 2);
  const std::span<const uint8_t> short_blocks(c.blocks.data(), c.blocks.size() - 1);
  EXPECT_THROW(
      {
        try {
          pack_gemv_experts(short_blocks, c.scales, 2, shape, false);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("blocks"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  EXPECT_THROW(pack_gemv_experts(c.blocks, c.scales, 3, shape, false), Error);  // 3 experts' worth expected
  EXPECT_THROW(pack_gemv_experts(c.blocks, c.scales, 0, shape, false), Error);
  const std::vector<int8_t> one_expert_exponents(16);  // 2 experts' rows expected
  EXPECT_THROW(
      {
        try {
          pack_gemv_experts(c.blocks, c.scales, 2, shape, false, 0, one_expert_exponents);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("fp8_exponents"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
}

}  // namespace
}  // namespace mxmoe
