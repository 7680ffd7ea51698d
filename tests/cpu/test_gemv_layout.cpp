// The GEMV family's host-side pieces: the packed weight layout (every checkpoint byte lands where the
// kernel's lanes read it) and the in-register e2m1 -> bf16 decode and scale multipliers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "layout/mx_decode.cuh"
#include "kernels/gemv/gemv.hpp"
#include "layout/gemv_layout.hpp"
#include "mxmoe/error.hpp"
#include "mxmoe/formats.hpp"
#include "test_support.hpp"

namespace mxmoe::gemv {
namespace {

using mxmoe::test::fresh_seed;

float bf16_bits_to_float(uint32_t bits16) {
  const uint32_t f = bits16 << 16;
  float out;
  std::memcpy(&out, &f, 4);
  return out;
}

struct LayoutCase {
  int64_t rows, kblocks;
  bool swiglu;
};

class GemvLayout : public ::testing::TestWithParam<LayoutCase> {};

TEST_P(GemvLayout, EveryBlockLandsWhereTheKernelReadsIt) {
  const LayoutCase c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> blocks(static_cast<size_t>(c.rows * c.kblocks * 16)), scales(static_cast<size_t>(c.rows * c.kblocks));
  for (auto& b : blocks) b = static_cast<uint8_t>(rng());
  for (auto& s : scales) s = static_cast<uint8_t>(rng() % 255);
  const PackedShape shape = packed_shape(c.rows, c.kblocks);
  ASSERT_EQ(shape.chunks, (c.kblocks + 3) / 4);
  std::vector<uint8_t> packed(static_cast<size_t>(shape.bytes()), 0xAB);
  pack_expert(blocks.data(), scales.data(), shape, c.swiglu, packed.data());

  // The kernel's read pattern, written independently: record (tile, chunk) of 1088 bytes; lane
  // L = 4g + t, half h reads 16 bytes at 64 + 256t + 128h + 16 (g xor 2t) for tile row g + 8h, block
  // 4*chunk + t, and the scale byte at 16 (3 - t) + 2g + h.
  std::vector<bool> covered(packed.size(), false);
  for (int64_t tile = 0; tile < shape.tiles; ++tile)
    for (int64_t chunk = 0; chunk < shape.chunks; ++chunk)
      for (int half = 0; half < 2; ++half)
        for (int lane = 0; lane < 32; ++lane) {
          const int64_t record = (tile * shape.chunks + chunk) * 1088;
          const int local_row = lane / 4 + 8 * half;
          const int64_t block = chunk * 4 + lane % 4;
          // Checkpoint row: GEMM1 tiles hold gates (even rows) then linears (odd rows) of 8 features.
          const int64_t row = c.swiglu ? 2 * (tile * 8 + lane / 4) + half : tile * 16 + local_row;
          ASSERT_EQ(source_row(tile, local_row, c.swiglu), row);
          const int g = lane / 4, t = lane % 4;
          const int64_t w = record + 64 + 256 * t + 128 * half + 16 * (g ^ (2 * t));
          const int64_t s = record + 16 * (3 - t) + 2 * g + half;
          ASSERT_EQ(record + lane_data_offset(lane) + half * kRecordHalfBytes, w);
          ASSERT_EQ(record + lane_scale_offset(lane) + half, s);
          ASSERT_EQ(packed_weight_offset(shape, tile, local_row, block), w);
          ASSERT_EQ(packed_scale_offset(shape, tile, local_row, block), s);
          for (int i = 0; i < 16; ++i) covered[static_cast<size_t>(w + i)] = true;
          covered[static_cast<size_t>(s)] = true;
          if (block < c.kblocks) {
            // Each 32-bit word is stored bit-scattered for the kernel's decode (mx_decode.cuh).
            uint8_t natural[16];
            for (int i = 0; i < 4; ++i) {
              uint32_t word;
              std::memcpy(&word, &packed[static_cast<size_t>(w + 4 * i)], 4);
              word = kernels::unpack_e2m1x8(word);
              std::memcpy(natural + 4 * i, &word, 4);
            }
            ASSERT_EQ(std::memcmp(natural, &blocks[static_cast<size_t>((row * c.kblocks + block) * 16)], 16), 0)
                << "tile " << tile << " chunk " << chunk << " lane " << lane << " half " << half;
            ASSERT_EQ(packed[static_cast<size_t>(s)], scales[static_cast<size_t>(row * c.kblocks + block)]);
          } else {  // padding past K: zero weights, scale 1.0
            for (int i = 0; i < 16; ++i) ASSERT_EQ(packed[static_cast<size_t>(w + i)], 0);
            ASSERT_EQ(packed[static_cast<size_t>(s)], 127);
          }
        }
  for (size_t i = 0; i < covered.size(); ++i) ASSERT_TRUE(covered[i]) << "byte " << i << " is not read by any lane";
}

// A tile's last chunk with n < 4 blocks of K: its real bytes are the one run [64 - 16n, 64 + 256n) and
// the record ends in tail_cut_bytes of padding only, which the GEMV ring's copy leaves out.
TEST_P(GemvLayout, LastChunksBlocksAreOneRunBeforeTheCut) {
  const LayoutCase c = GetParam();
  const PackedShape shape = packed_shape(c.rows, c.kblocks);
  const int n = static_cast<int>(c.kblocks % 4);
  ASSERT_EQ(tail_cut_bytes(c.kblocks), n == 0 ? 0 : 256 * (4 - n));
  std::vector<uint8_t> blocks(static_cast<size_t>(c.rows * c.kblocks * 16), 0x5A);
  std::vector<uint8_t> scales(static_cast<size_t>(c.rows * c.kblocks), 3);
  std::vector<uint8_t> packed(static_cast<size_t>(shape.bytes()), 0xAB);
  pack_expert(blocks.data(), scales.data(), shape, c.swiglu, packed.data());
  const int begin = n == 0 ? 0 : 64 - 16 * n, end = kChunkBytes - tail_cut_bytes(c.kblocks);
  for (int64_t tile = 0; tile < shape.tiles; ++tile) {
    const int64_t record = (tile * shape.chunks + shape.chunks - 1) * kChunkBytes;
    for (int local_row = 0; local_row < 16; ++local_row)
      for (int64_t block = (shape.chunks - 1) * 4; block < c.kblocks; ++block) {
        const int64_t w = packed_weight_offset(shape, tile, local_row, block) - record;
        const int64_t s = packed_scale_offset(shape, tile, local_row, block) - record;
        EXPECT_TRUE(w >= begin && w + 16 <= end) << "tile " << tile << " row " << local_row << " block " << block;
        EXPECT_TRUE(s >= begin && s < end) << "tile " << tile << " row " << local_row << " block " << block;
      }
    // Outside the run: padding only (zero weights, scale 1.0).
    for (int i = 0; i < kChunkBytes; ++i)
      if (i < begin || i >= end) ASSERT_EQ(packed[static_cast<size_t>(record + i)], i < 64 ? 127 : 0) << "byte " << i;
  }
}

// Each quarter warp's 16-byte weight loads (either half) hit 8 different 16-byte bank groups.
TEST(GemvLayout, LaneLoadsAreConflictFree) {
  for (int half = 0; half < 2; ++half)
    for (int quarter = 0; quarter < 4; ++quarter) {
      std::set<int> groups;
      for (int lane = 8 * quarter; lane < 8 * quarter + 8; ++lane) {
        const int offset = lane_data_offset(lane) + half * kRecordHalfBytes;
        ASSERT_EQ(offset % 16, 0);
        groups.insert(offset / 16 % 8);
      }
      EXPECT_EQ(groups.size(), 8u) << "half " << half << " quarter " << quarter;
    }
  std::set<int> scale_words;
  for (int lane = 0; lane < 32; ++lane) {
    ASSERT_EQ(lane_scale_offset(lane) % 2, 0);
    scale_words.insert(lane_scale_offset(lane));
  }
  EXPECT_EQ(scale_words.size(), 32u);
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemvLayout,
                         ::testing::Values(LayoutCase{16, 4, false}, LayoutCase{32, 3, true}, LayoutCase{48, 5, false},
                                           LayoutCase{64, 90, true}, LayoutCase{368, 9, false},
                                           LayoutCase{32, 7, true}));

TEST(GemvLayout, RejectsBadShapes) {
  EXPECT_THROW(packed_shape(24, 4), Error);
  EXPECT_THROW(packed_shape(0, 4), Error);
  EXPECT_THROW(packed_shape(16, 0), Error);
}

// K limits and ring depth from shared memory, next to the kernels' static shared memory (ptxas:
// about 4.5 KB). Hopper allows 227 KB per block, SM120/SM121 99 KB.
TEST(GemvLimits, StagesAndMaxKFollowSharedMemory) {
  const size_t static_smem = 4480, hopper = 232448, sm120 = 101376;
  EXPECT_EQ(kDefaultStages, 2);
  EXPECT_TRUE(stages_fit(2880, 3, hopper, static_smem));
  EXPECT_TRUE(stages_fit(2880, 2, sm120, static_smem)) << "gpt-oss must fit on SM120 with the default ring";
  EXPECT_FALSE(stages_fit(2880, 3, sm120, static_smem)) << "3 stages must be refused on SM120 at gpt-oss's K";
  EXPECT_LE(smem_bytes(2880, 2) + static_smem, sm120) << "gpt-oss must fit on SM120 with 2 stages";
  EXPECT_GT(smem_bytes(2880, 3) + static_smem, sm120);
  EXPECT_LT(smem_bytes(2880, 2), smem_bytes(2880, 3));
  for (const size_t optin : {hopper, sm120}) {
    const int k = max_k(optin, static_smem);
    EXPECT_GE(k, 2880);
    EXPECT_EQ(k % 128, 0);
    EXPECT_LE(smem_bytes(k, 2) + static_smem, optin) << "max_k must fit";
    EXPECT_GT(smem_bytes(k + 128, 2) + static_smem, optin) << "max_k must be the largest that fits";
  }
  EXPECT_EQ(max_k(1000, static_smem), 0);
  EXPECT_FALSE(stages_fit(64, 2, 1000, static_smem));
}

TEST(GemvLayout, WideScalesDetection) {
  const std::vector<uint8_t> normal{0, 1, 120, 127, 128};
  EXPECT_FALSE(needs_wide_scales(normal.data(), static_cast<int64_t>(normal.size())));
  for (uint8_t wide : {uint8_t{129}, uint8_t{200}, uint8_t{255}}) {
    std::vector<uint8_t> v = normal;
    v.push_back(wide);
    EXPECT_TRUE(needs_wide_scales(v.data(), static_cast<int64_t>(v.size()))) << int(wide);
  }
}

// decode_e2m1x8 yields the e2m1 values times 2^-126 as bf16, in pair order (3,7),(2,6),(1,5),(0,4);
// times the scale multiplier 2^(s-1) that is the dequantised value (checked here in float).
TEST(MxDecode, EveryCodeAtEveryPosition) {
  for (int code = 0; code < 16; ++code)
    for (int pos = 0; pos < 8; ++pos) {
      const uint32_t word = 0x00000000u | (static_cast<uint32_t>(code) << (4 * pos));
      uint32_t out[4];
      kernels::decode_e2m1x8(word, out);
      const int order[8] = {3, 7, 2, 6, 1, 5, 0, 4};
      for (int j = 0; j < 4; ++j)
        for (int h = 0; h < 2; ++h) {
          const int element = order[2 * j + h];
          const float got = bf16_bits_to_float((out[j] >> (16 * h)) & 0xFFFFu) * std::ldexp(1.0f, 126);
          const float want = element == pos ? e2m1_to_float(static_cast<uint8_t>(code)) : 0.0f;
          ASSERT_EQ(got, want) << "code " << code << " at " << pos << ", pair " << j << " half " << h;
          if (element == pos) ASSERT_EQ(std::signbit(got), code >= 8);
        }
    }
}

// The scattered word order: packing is a bijection, and the 8-instruction decode of a packed word
// is exactly the reference decode of the natural word, for random words and every single nibble.
TEST(MxDecode, PackedWordDecodesLikeTheNaturalWord) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::set<int> positions;
  for (const auto& pair : kernels::kPackedBit)
    for (const auto& half : pair)
      for (const int bit : half) positions.insert(bit);
  ASSERT_EQ(positions.size(), 32u) << "the scatter must use every bit once";
  auto check = [](uint32_t q) {
    uint32_t want[4], got[4];
    kernels::decode_e2m1x8(q, want);
    kernels::decode_e2m1x8_packed(kernels::pack_e2m1x8(q), got);
    for (int j = 0; j < 4; ++j) ASSERT_EQ(got[j], want[j]) << std::hex << "word 0x" << q << " pair " << j;
    ASSERT_EQ(kernels::unpack_e2m1x8(kernels::pack_e2m1x8(q)), q);
  };
  for (int i = 0; i < 100000; ++i) check(static_cast<uint32_t>(rng()));
  for (int e = 0; e < 8; ++e)
    for (uint32_t code = 0; code < 16; ++code) check(code << (4 * e));
  check(0xFFFFFFFFu);
}

TEST(MxDecode, ScaleMultipliers) {
  for (uint32_t s = 0; s <= 128; ++s) {
    const uint32_t m = kernels::scale_multiplier_fast(s);
    ASSERT_EQ(m, kernels::scale_multiplier(s)) << s;
    ASSERT_EQ(m & 0xFFFFu, m >> 16);
    ASSERT_EQ(bf16_bits_to_float(m & 0xFFFFu), std::ldexp(1.0f, static_cast<int>(s) - 1)) << s;
  }
  for (uint32_t s = 129; s < 255; ++s) {  // two factors: 2^127 * 2^(s-128)
    const float a = bf16_bits_to_float(kernels::scale_multiplier(s) & 0xFFFFu);
    const float b = bf16_bits_to_float(kernels::scale_multiplier_high(s) & 0xFFFFu);
    ASSERT_EQ(a, std::ldexp(1.0f, 127)) << s;
    ASSERT_EQ(b, std::ldexp(1.0f, static_cast<int>(s) - 128)) << s;
  }
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(kernels::scale_multiplier(0xFF) & 0xFFFFu)));
}

}  // namespace
}  // namespace mxmoe::gemv
