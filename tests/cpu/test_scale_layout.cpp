// The 128x4 swizzled scale layout (FACTS.md §4): the header's offset function against the formula
// written out again here, bijection and zero padding, round trips, and per-group offsets.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "mxmoe/error.hpp"
#include "mxmoe/scale_layout.hpp"
#include "test_support.hpp"

namespace {

// gpt-oss: K = 2880 -> 90 k-blocks -> 92 padded; 2880 rows -> 2944 padded.
static_assert(mxmoe::padded_kblocks(2880 / 32) == 92);
static_assert(mxmoe::padded_scale_rows(2880) == 2944);
static_assert(mxmoe::swizzled_scale_bytes(2880, 90) == 2944 * 92);
static_assert(mxmoe::swizzled_scale_offset(0, 0, 90) == 0);

// FACTS.md §4 written independently: a 128-row x 4-k-block tile of 512 bytes, tiles ordered
// k-tile fastest; inside a tile, row r%32 picks a 16-byte line, (r%128)/32 a 4-byte group in it,
// and k%4 the byte.
int64_t reference_offset(int64_t r, int64_t k, int64_t kblocks) {
  const int64_t k_tiles = (kblocks + 3) / 4;
  const int64_t tile = (r / 128) * k_tiles + k / 4;
  const int64_t line = r % 32;
  const int64_t group = (r % 128) / 32;
  return tile * 512 + line * 16 + group * 4 + k % 4;
}

using mxmoe::test::expect_error_naming;
uint32_t fresh_seed() { return static_cast<uint32_t>(mxmoe::test::fresh_seed()); }

// Random non-zero scale bytes, so that data can never be mistaken for zero padding.
std::vector<uint8_t> random_plain(std::mt19937& rng, int64_t rows, int64_t kblocks) {
  std::vector<uint8_t> plain(static_cast<size_t>(rows * kblocks));
  for (uint8_t& b : plain) b = static_cast<uint8_t>(1 + rng() % 255);
  return plain;
}

TEST(ScaleLayout, OffsetMatchesTheFormula) {
  for (int64_t kblocks : {1, 3, 4, 5, 90, 92}) {
    for (int64_t r = 0; r < 700; ++r) {
      for (int64_t k = 0; k < kblocks; ++k) {
        ASSERT_EQ(mxmoe::swizzled_scale_offset(r, k, kblocks), reference_offset(r, k, kblocks))
            << "r " << r << " k " << k << " kblocks " << kblocks;
      }
    }
  }
  // A few by hand (kblocks 90 -> 23 k-tiles of 512 bytes per 128-row band).
  EXPECT_EQ(mxmoe::swizzled_scale_offset(1, 0, 90), 16);
  EXPECT_EQ(mxmoe::swizzled_scale_offset(32, 0, 90), 4);
  EXPECT_EQ(mxmoe::swizzled_scale_offset(0, 3, 90), 3);
  EXPECT_EQ(mxmoe::swizzled_scale_offset(0, 4, 90), 512);
  EXPECT_EQ(mxmoe::swizzled_scale_offset(128, 0, 90), 23 * 512);
  EXPECT_EQ(mxmoe::swizzled_scale_offset(2879, 89, 90), 22 * 23 * 512 + 22 * 512 + 31 * 16 + 1 * 4 + 1);
}

TEST(ScaleLayout, SizesForGptOss) {
  EXPECT_EQ(mxmoe::padded_kblocks(90), 92);
  EXPECT_EQ(mxmoe::padded_scale_rows(2880), 2944);
  EXPECT_EQ(mxmoe::padded_scale_rows(5760), 5760);  // mlp1: 2I = 5760 rows, already a multiple of 128
  EXPECT_EQ(mxmoe::swizzled_scale_bytes(2880, 90), 2944 * 92);
  EXPECT_EQ(mxmoe::swizzled_scale_bytes(5760, 90), 5760 * 92);
  EXPECT_EQ(mxmoe::swizzled_scale_bytes(1, 1), 128 * 4);
  EXPECT_EQ(mxmoe::swizzled_scale_bytes(0, 90), 0);
}

TEST(ScaleLayout, SwizzleIsABijectionWithZeroPadding) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("random seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (int64_t rows : {1, 127, 128, 129, 2880}) {
    for (int64_t kblocks : {1, 3, 4, 90}) {
      SCOPED_TRACE("rows " + std::to_string(rows) + " kblocks " + std::to_string(kblocks));
      const int64_t bytes = mxmoe::swizzled_scale_bytes(rows, kblocks);
      ASSERT_EQ(bytes, (rows + 127) / 128 * 128 * ((kblocks + 3) / 4 * 4));
      std::vector<int> hits(static_cast<size_t>(bytes), 0);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t k = 0; k < kblocks; ++k) {
          const int64_t off = mxmoe::swizzled_scale_offset(r, k, kblocks);
          ASSERT_GE(off, 0);
          ASSERT_LT(off, bytes) << "r " << r << " k " << k;
          ASSERT_EQ(++hits[static_cast<size_t>(off)], 1) << "offset " << off << " hit twice";
        }
      }
      // The padded grid (all rows and k-blocks up to the padding) covers the buffer exactly.
      for (int64_t r = 0; r < mxmoe::padded_scale_rows(rows); ++r) {
        for (int64_t k = 0; k < mxmoe::padded_kblocks(kblocks); ++k) {
          if (r < rows && k < kblocks) continue;
          ASSERT_EQ(++hits[static_cast<size_t>(mxmoe::swizzled_scale_offset(r, k, kblocks))], 1);
        }
      }
      for (int h : hits) ASSERT_EQ(h, 1);

      const auto plain = random_plain(rng, rows, kblocks);
      std::vector<uint8_t> sw(static_cast<size_t>(bytes), 0xAB);  // swizzle must overwrite all of it
      mxmoe::swizzle_scales(plain, rows, kblocks, sw);
      std::vector<bool> is_data(sw.size(), false);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t k = 0; k < kblocks; ++k) {
          const auto off = static_cast<size_t>(reference_offset(r, k, kblocks));
          ASSERT_EQ(sw[off], plain[static_cast<size_t>(r * kblocks + k)]) << "r " << r << " k " << k;
          is_data[off] = true;
        }
      }
      int64_t zeros = 0;
      for (size_t i = 0; i < sw.size(); ++i) {
        if (!is_data[i]) {
          ASSERT_EQ(sw[i], 0) << "padding byte " << i;
          ++zeros;
        }
      }
      EXPECT_EQ(zeros, bytes - rows * kblocks);

      std::vector<uint8_t> back(plain.size(), 0);
      mxmoe::unswizzle_scales(sw, rows, kblocks, back);
      EXPECT_EQ(back, plain);
    }
  }
}

TEST(ScaleLayout, GroupedOffsets) {
  const std::vector<int64_t> rows{0, 1, 127, 128, 129};
  const auto off = mxmoe::grouped_scale_offsets(rows, 90);
  const std::vector<int64_t> expect{0, 0, 128 * 92, 2 * 128 * 92, 3 * 128 * 92, 3 * 128 * 92 + 256 * 92};
  EXPECT_EQ(off, expect);
  EXPECT_EQ(mxmoe::grouped_scale_offsets(std::span<const int64_t>(), 90), std::vector<int64_t>{0});

  // gpt-oss-20b mlp2: 32 experts of 2880 rows each.
  const std::vector<int64_t> experts(32, 2880);
  const auto e = mxmoe::grouped_scale_offsets(experts, 90);
  ASSERT_EQ(e.size(), 33u);
  for (size_t g = 0; g < 32; ++g) EXPECT_EQ(e[g], static_cast<int64_t>(g) * 2944 * 92);
  EXPECT_EQ(e[32], 32 * 2944 * 92);
}

TEST(ScaleLayout, GroupedSwizzleRoundTrips) {
  // Several groups swizzled one after another at their offsets unswizzle to the originals.
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("random seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const std::vector<int64_t> rows{129, 1, 0, 256, 37};
  const int64_t kblocks = 1 + static_cast<int64_t>(rng() % 20);
  const auto off = mxmoe::grouped_scale_offsets(rows, kblocks);
  std::vector<uint8_t> buffer(static_cast<size_t>(off.back()), 0xAB);
  std::vector<std::vector<uint8_t>> plains;
  for (size_t g = 0; g < rows.size(); ++g) {
    plains.push_back(random_plain(rng, rows[g], kblocks));
    mxmoe::swizzle_scales(plains[g], rows[g], kblocks,
                          std::span(buffer).subspan(static_cast<size_t>(off[g]), static_cast<size_t>(off[g + 1] - off[g])));
  }
  // Data bytes are non-zero, so the zero count shows every padding byte was written.
  int64_t data = 0, zeros = 0;
  for (int64_t r : rows) data += r * kblocks;
  for (uint8_t b : buffer) zeros += b == 0;
  EXPECT_EQ(zeros, off.back() - data);
  for (size_t g = 0; g < rows.size(); ++g) {
    std::vector<uint8_t> back(plains[g].size());
    mxmoe::unswizzle_scales(std::span<const uint8_t>(buffer).subspan(static_cast<size_t>(off[g]),
                                                                     static_cast<size_t>(off[g + 1] - off[g])),
                            rows[g], kblocks, back);
    EXPECT_EQ(back, plains[g]) << "group " << g;
  }
}


TEST(ScaleLayout, BadArgumentsThrow) {
  std::vector<uint8_t> plain(129 * 3, 1), sw(256 * 4), small(256 * 4 - 1), big(256 * 4 + 1);
  expect_error_naming([&] { mxmoe::swizzle_scales(std::span(plain).first(100), 129, 3, sw); }, "plain");
  expect_error_naming([&] { mxmoe::swizzle_scales(plain, 129, 3, small); }, "dst");
  expect_error_naming([&] { mxmoe::swizzle_scales(plain, 129, 3, big); }, "dst");
  expect_error_naming([&] { mxmoe::swizzle_scales(plain, -1, 3, sw); }, "rows");
  expect_error_naming([&] { mxmoe::swizzle_scales(plain, 129, -3, sw); }, "kblocks");
  expect_error_naming([&] { mxmoe::unswizzle_scales(small, 129, 3, plain); }, "swizzled");
  expect_error_naming([&] { mxmoe::unswizzle_scales(sw, 129, 3, std::span(plain).first(100)); }, "plain");
  expect_error_naming([&] { mxmoe::unswizzle_scales(sw, 129, -1, plain); }, "kblocks");
  const std::vector<int64_t> bad_rows{128, -5};
  expect_error_naming([&] { mxmoe::grouped_scale_offsets(bad_rows, 90); }, "rows_per_group[1]");
  const std::vector<int64_t> good_rows{128};
  expect_error_naming([&] { mxmoe::grouped_scale_offsets(good_rows, -1); }, "kblocks");
}

}  // namespace
