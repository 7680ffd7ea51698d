// The FP8 (W4A8) wgmma tiles' host-checkable parts: the activation order (kernels/sm90/fp8_chunk_order.hpp)
// against the A fragments that the decode (layout/fp8_decode.cuh) fills, the decode itself against
// fp8_model's e4m3 weights bit for bit (every magnitude, sign, scale shift, NaN scale), and the per-row
// exponents (layout/fp8_row_exponents.hpp) against fp8::row_exponent.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "kernels/sm90/fp8_chunk_order.hpp"
#include "layout/fp8_decode.cuh"
#include "layout/fp8_row_exponents.hpp"
#include "layout/gemv_layout.hpp"
#include "layout/mx_decode.cuh"
#include "mxmoe/error.hpp"
#include "mxmoe/formats.hpp"
#include "reference/fp8_model.hpp"
#include "test_support.hpp"

namespace mxmoe {
namespace {

// The elements of a word in the decoded registers' bytes: a = [e0, e3, e1, e2], b = [e4, e7, e5, e6].
constexpr int kElementOfByte[2][4] = {{0, 3, 1, 2}, {4, 7, 5, 6}};

TEST(Fp8ChunkOrder, IsAPermutationOfTheChunkAndOfAPaddedRow) {
  std::set<int> seen;
  for (int k = 0; k < gemv::kChunkK; ++k) {
    const int at = sm90::fp8_chunk_position(k);
    EXPECT_GE(at, 0);
    EXPECT_LT(at, gemv::kChunkK);
    seen.insert(at);
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(gemv::kChunkK));
  for (const int k : {128, 2880, 2944, 4160}) {
    const int64_t padded = sm90::padded_k(k);
    std::vector<int> hits(static_cast<size_t>(padded), 0);
    for (int64_t e = 0; e < padded; ++e) ++hits[static_cast<size_t>(sm90::fp8_row_position(e))];
    for (int64_t i = 0; i < padded; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)], 1) << "K " << k << ", byte " << i;
    // Chunk by chunk: element k stays in its chunk's line.
    for (int64_t e = 0; e < padded; ++e) ASSERT_EQ(sm90::fp8_row_position(e) / 128, e / 128);
  }
}

// K step s of a chunk: lane (g, t)'s a0 bytes are K slots 4t..4t+3 and a2's 16+4t..16+4t+3 (the PTX ISA's
// 8-bit A fragment at K = 32); the decode puts word s of MX block t there, a = a0 and b = a2.
TEST(Fp8ChunkOrder, EachKStepHoldsTheLanesDecodedBytes) {
  int stored[gemv::kChunkK];  // stored byte -> natural element of the chunk
  for (int k = 0; k < gemv::kChunkK; ++k) stored[sm90::fp8_chunk_position(k)] = k;
  for (int s = 0; s < 4; ++s)
    for (int t = 0; t < 4; ++t)
      for (int reg = 0; reg < 2; ++reg)
        for (int j = 0; j < 4; ++j) {
          SCOPED_TRACE("step " + std::to_string(s) + ", lane t " + std::to_string(t) + ", register " +
                       std::to_string(reg) + ", byte " + std::to_string(j));
          EXPECT_EQ(stored[32 * s + 16 * reg + 4 * t + j], 32 * t + 8 * s + kElementOfByte[reg][j]);
        }
}

// Every e2m1 code of a word, decoded at shift d = x - c, against float_to_e4m3 of its value / 2^c (what
// fp8::e4m3_weight_row computes), bit for bit; a NaN scale decodes to NaN.
TEST(Fp8Decode, MatchesTheModelsE4m3WeightsBitForBit) {
  std::mt19937_64 rng(test::fresh_seed());
  std::vector<uint32_t> words = {0x76543210u, 0xFEDCBA98u, 0x89ABCDEFu, 0x01234567u, 0u, 0x88888888u};
  for (int i = 0; i < 200; ++i) words.push_back(static_cast<uint32_t>(rng()));
  int checked_slow = 0;
  for (const uint32_t natural : words) {
    const uint32_t packed = kernels::pack_e2m1x8_fp8(natural);
    for (int scale = 0; scale < 256; ++scale)
      for (int d = -30; d <= kernels::kFp8MaxShift; ++d) {
        const int x = scale - 127, c = x - d;
        const kernels::Fp8Table table = kernels::fp8_table(static_cast<uint32_t>(scale), c);
        uint32_t regs[2];
        kernels::decode_e2m1x8_e4m3(packed, table, regs[0], regs[1]);
        checked_slow += d < kernels::kFp8FastMinShift;
        for (int reg = 0; reg < 2; ++reg)
          for (int j = 0; j < 4; ++j) {
            const int e = kElementOfByte[reg][j];
            const uint8_t code = (natural >> (4 * e)) & 0xF;
            const uint8_t got = (regs[reg] >> (8 * j)) & 0xFF;
            if (scale == kE8m0Nan) {
              ASSERT_TRUE(std::isnan(e4m3_to_float(got))) << "NaN scale, code " << int(code);
              continue;
            }
            // The model: v = e2m1 x 2^x, e4m3(v / 2^c).
            std::vector<double> v = {std::ldexp(static_cast<double>(e2m1_to_float(code)), x)};
            const uint8_t want = float_to_e4m3(static_cast<float>(std::ldexp(v[0], -c)));
            ASSERT_EQ(got, want) << "code " << int(code) << ", scale " << scale << ", d " << d;
            fp8::e4m3_weight_row(v, c);
            const double back = std::ldexp(static_cast<double>(e4m3_to_float(got)), c);
            ASSERT_EQ(back, v[0]) << "code " << int(code) << ", scale " << scale << ", d " << d;
          }
      }
  }
  EXPECT_GT(checked_slow, 0);
}

// The kernels look a lane's tables up by its two shift codes' bytes, as byte offsets into an array of
// fp8_entry_table's (wgmma_fp8_tile.cuh): for every code fp8_shift_code can make, the entry at its byte is
// its table, and the fast table wherever fp8_fast_code says so; no code's byte is another's, and the
// entries no code reaches hold NaN tables.
TEST(Fp8Decode, EachCodesByteIsItsTablesOffset) {
  std::set<int> codes;
  for (int scale = 0; scale < 256; ++scale)
    for (int c = -140; c <= 140; ++c) codes.insert(kernels::fp8_shift_code(static_cast<uint32_t>(scale), c));
  ASSERT_TRUE(codes.count(kernels::kFp8NanCode) && codes.count(-128) && codes.count(8 * kernels::kFp8FastMinShift) &&
              codes.count(8 * kernels::kFp8FastMinShift - 8) && codes.count(8 * kernels::kFp8MaxShift));
  kernels::Fp8Table tables[kernels::kFp8TableEntries];
  for (int e = 0; e < kernels::kFp8TableEntries; ++e) tables[e] = kernels::fp8_entry_table(e);
  std::set<int> bytes;
  for (const int code : codes) {
    const auto byte = static_cast<uint8_t>(static_cast<int8_t>(code));  // as a record stores it
    ASSERT_EQ(byte % sizeof(kernels::Fp8Table), 0u) << "code " << code;
    ASSERT_TRUE(bytes.insert(byte).second) << "code " << code;
    kernels::Fp8Table entry;
    std::memcpy(&entry, reinterpret_cast<const uint8_t*>(tables) + byte, sizeof entry);
    const kernels::Fp8Table exact = kernels::fp8_code_table(code);
    ASSERT_TRUE(entry.lo == exact.lo && entry.hi == exact.hi) << "code " << code;
    if (kernels::fp8_fast_code(code)) {
      const kernels::Fp8Table fast = kernels::fp8_fast_table(code);
      ASSERT_TRUE(exact.lo == fast.lo && exact.hi == fast.hi) << "code " << code;
    }
  }
  EXPECT_EQ(tables[kernels::kFp8NanCode / 8].lo, kernels::kFp8NanTable);
  static_assert(sizeof tables == 256, "every byte value is an offset inside the array");
  for (int e = 0; e < kernels::kFp8TableEntries; ++e)
    if (!bytes.count(8 * e)) {
      EXPECT_TRUE(tables[e].lo == kernels::kFp8NanTable && tables[e].hi == kernels::kFp8NanTable) << "entry " << e;
    }
}

// The kernel's data path on the host, one 16-row tile: each lane's record words and scales decoded at
// its rows' exponents (wgmma_fp8_tile.cuh), placed in the 8-bit A fragment of K step s (a0 = row g K
// slots 4t.., a1 = row g+8, a2 = row g slots 16+4t.., a3 = row g+8), times the staged activation bytes
// 32s .. 32s + 31 of each row's chunk line (fp8_chunk_order.hpp), equals the fp8 model's dot products
// of the same rows: the record offsets, the decode, the fragment and the activation order agree. GEMM1's
// row order (gates and linears) and GEMM2's; K a multiple of 128 and K % 128 == 64.
TEST(Fp8DataPath, TheFragmentsMeetTheActivationsAsTheModelSays) {
  std::mt19937_64 rng(test::fresh_seed());
  for (const bool swiglu_pairs : {false, true})
    for (const int k : {256, 352}) {
      SCOPED_TRACE(std::string(swiglu_pairs ? "GEMM1" : "GEMM2") + ", K " + std::to_string(k));
      const int n = 16, kb = k / 32, act_rows = 8;
      std::vector<uint8_t> blocks(n * kb * 16), scales(n * kb);
      for (auto& b : blocks) b = static_cast<uint8_t>(rng());
      for (int r = 0; r < n; ++r)
        for (int b = 0; b < kb; ++b) scales[r * kb + b] = static_cast<uint8_t>(118 + rng() % 8 - (r == 5 && b % 3 == 0) * 17);
      const gemv::PackedShape shape = gemv::packed_shape(n, kb);
      std::vector<uint8_t> packed(static_cast<size_t>(shape.bytes()));
      std::vector<int8_t> exponents(n);
      layout::fp8_row_exponents(scales.data(), 1, n, kb, exponents.data());
      gemv::pack_expert(blocks.data(), scales.data(), shape, swiglu_pairs, packed.data(), exponents.data());
      // The model's weights (checkpoint rows) and activations (e4m3 values), and the staged bytes.
      std::vector<double> w(n * k), x(act_rows * k);
      for (int r = 0; r < n; ++r) {
        for (int kk = 0; kk < k; ++kk) {
          const uint8_t byte = blocks[(r * kb + kk / 32) * 16 + (kk % 32) / 2];
          w[r * k + kk] = std::ldexp(double{e2m1_to_float(kk % 2 ? byte >> 4 : byte & 0xF)}, scales[r * kb + kk / 32] - 127);
        }
        fp8::e4m3_weight_row(std::span<double>(w.data() + r * k, k), exponents[r]);
      }
      const int64_t pitch = sm90::padded_k(k);
      std::vector<uint8_t> staged(act_rows * pitch, 0);
      for (int a = 0; a < act_rows; ++a)
        for (int kk = 0; kk < k; ++kk) {
          const uint8_t code = static_cast<uint8_t>(rng() % 0x7F) | static_cast<uint8_t>(rng() % 2 << 7);
          x[a * k + kk] = e4m3_to_float(code);
          staged[a * pitch + sm90::fp8_row_position(kk)] = code;
        }
      // D[tile row][activation row], by K steps as the kernel issues them.
      double d[16][act_rows] = {};
      for (int chunk = 0; chunk < shape.chunks; ++chunk) {
        const uint8_t* record = packed.data() + chunk * gemv::kChunkBytes;
        uint8_t a_frag[16][32];  // [tile row][K slot] of one step
        for (int s = 0; s < 4; ++s) {
          for (int lane = 0; lane < 32; ++lane) {
            const int g = lane / 4, t = lane % 4;
            uint32_t regs[2][2];  // [row g, g+8][a, b]
            for (int h = 0; h < 2; ++h) {
              const auto code = static_cast<int8_t>(record[gemv::lane_scale_offset(lane) + h]);
              uint32_t word;
              std::memcpy(&word, record + gemv::lane_data_offset(lane) + h * gemv::kRecordHalfBytes + 4 * s, 4);
              kernels::decode_e2m1x8_e4m3(word, kernels::fp8_code_table(code), regs[h][0], regs[h][1]);
            }
            for (int j = 0; j < 4; ++j) {
              a_frag[g][4 * t + j] = (regs[0][0] >> (8 * j)) & 0xFF;          // a0
              a_frag[g + 8][4 * t + j] = (regs[1][0] >> (8 * j)) & 0xFF;      // a1
              a_frag[g][16 + 4 * t + j] = (regs[0][1] >> (8 * j)) & 0xFF;     // a2
              a_frag[g + 8][16 + 4 * t + j] = (regs[1][1] >> (8 * j)) & 0xFF; // a3
            }
          }
          for (int m = 0; m < 16; ++m)
            for (int a = 0; a < act_rows; ++a)
              for (int slot = 0; slot < 32; ++slot) {
                const int ckpt = static_cast<int>(gemv::source_row(0, m, swiglu_pairs));
                d[m][a] += std::ldexp(double{e4m3_to_float(a_frag[m][slot])}, exponents[ckpt]) *
                           e4m3_to_float(staged[a * pitch + chunk * 128 + 32 * s + slot]);
              }
        }
      }
      for (int m = 0; m < 16; ++m) {
        const int ckpt = static_cast<int>(gemv::source_row(0, m, swiglu_pairs));
        for (int a = 0; a < act_rows; ++a) {
          double want = 0;
          for (int kk = 0; kk < k; ++kk) want += w[ckpt * k + kk] * x[a * k + kk];
          ASSERT_NEAR(d[m][a], want, 1e-9 * (std::abs(want) + 1e-30) + 1e-300) << "tile row " << m << ", row " << a;
        }
      }
    }
}

// A W4A8 layer's records: every block's scale byte is its shift code at its row's exponent and its words
// are the checkpoint's in the fp8 bit order; the padding blocks past K hold code 0 and zero words.
TEST(Fp8Records, HoldShiftCodesAndFp8Words) {
  std::mt19937_64 rng(test::fresh_seed());
  for (const bool swiglu_pairs : {false, true}) {
    const int n = 32, kb = 11;  // K = 352: the last chunk holds 3 blocks
    std::vector<uint8_t> blocks(n * kb * 16), scales(n * kb);
    for (auto& b : blocks) b = static_cast<uint8_t>(rng());
    for (auto& s : scales) s = static_cast<uint8_t>(100 + rng() % 30);
    scales[3] = kE8m0Nan;
    scales[5 * kb + 2] = 40;  // far below its row's largest: the slow tables
    const gemv::PackedShape shape = gemv::packed_shape(n, kb);
    std::vector<uint8_t> packed(static_cast<size_t>(shape.bytes()), 0x5A);
    std::vector<int8_t> exponents(n);
    layout::fp8_row_exponents(scales.data(), 1, n, kb, exponents.data());
    gemv::pack_expert(blocks.data(), scales.data(), shape, swiglu_pairs, packed.data(), exponents.data());
    for (int64_t tile = 0; tile < shape.tiles; ++tile)
      for (int local = 0; local < gemv::kTileRows; ++local) {
        const int64_t row = gemv::source_row(tile, local, swiglu_pairs);
        for (int64_t b = 0; b < shape.chunks * gemv::kChunkBlocks; ++b) {
          const auto code = static_cast<int8_t>(packed[gemv::packed_scale_offset(shape, tile, local, b)]);
          const uint8_t* words = packed.data() + gemv::packed_weight_offset(shape, tile, local, b);
          for (int w = 0; w < 4; ++w) {
            uint32_t got, natural = 0;
            std::memcpy(&got, words + 4 * w, 4);
            if (b < kb) std::memcpy(&natural, blocks.data() + (row * kb + b) * 16 + 4 * w, 4);
            ASSERT_EQ(got, kernels::pack_e2m1x8_fp8(natural)) << "row " << row << ", block " << b << ", word " << w;
          }
          const int want = b < kb ? kernels::fp8_shift_code(scales[row * kb + b], exponents[row]) : 0;
          ASSERT_EQ(code, want) << "row " << row << ", block " << b;
        }
      }
    EXPECT_EQ(static_cast<int8_t>(packed[gemv::packed_scale_offset(shape, 0, 0, 3)]),
              kernels::kFp8NanCode);
  }
}

// Every magnitude and sign of a word reaches its byte: the fp8 bit order's nibbles and sign bits are a
// permutation of the natural word's 32 bits.
TEST(Fp8Records, TheWordOrderIsABitPermutation) {
  std::set<uint32_t> images;
  for (int bit = 0; bit < 32; ++bit) {
    const uint32_t image = kernels::pack_e2m1x8_fp8(1u << bit);
    ASSERT_EQ(__builtin_popcount(image), 1) << "bit " << bit;
    images.insert(image);
  }
  EXPECT_EQ(images.size(), 32u);
}

TEST(Fp8RowExponents, AreTheModelsRowExponentsClampedToInt8) {
  std::mt19937_64 rng(test::fresh_seed());
  const int experts = 3, rows = 5, kblocks = 7;
  std::vector<uint8_t> scales(experts * rows * kblocks);
  for (auto& s : scales) s = static_cast<uint8_t>(100 + rng() % 40);
  // Row 1 of expert 0: one NaN scale (skipped); row 2: all NaN (0); row 3: tiny scales (c below -128,
  // clamped); row 4 of expert 2: the largest finite scale.
  scales[1 * kblocks + 3] = kE8m0Nan;
  for (int b = 0; b < kblocks; ++b) scales[2 * kblocks + b] = kE8m0Nan;
  for (int b = 0; b < kblocks; ++b) scales[3 * kblocks + b] = static_cast<uint8_t>(b % 3);
  scales[(2 * rows + 4) * kblocks + 2] = 254;
  std::vector<int8_t> out(experts * rows, 99);
  layout::fp8_row_exponents(scales.data(), experts, rows, kblocks, out.data());
  for (int r = 0; r < experts * rows; ++r) {
    const int c = fp8::row_exponent(std::span<const uint8_t>(scales.data() + r * kblocks, kblocks));
    EXPECT_EQ(out[r], std::max(c, -128)) << "row " << r;
  }
  EXPECT_EQ(out[2], 0);
  EXPECT_EQ(out[3], -128);
  EXPECT_EQ(out[2 * rows + 4], 254 - 127 - 6);
  // The clamp changes no decoded value: at c = -128 every block of such a row is exact.
  for (int b = 0; b < kblocks; ++b) {
    const int x = scales[3 * kblocks + b] - 127;
    std::vector<double> exact = {std::ldexp(6.0, x)}, clamped = exact;
    fp8::e4m3_weight_row(exact, fp8::row_exponent(std::span<const uint8_t>(scales.data() + 3 * kblocks, kblocks)));
    fp8::e4m3_weight_row(clamped, -128);
    EXPECT_EQ(exact[0], clamped[0]);
  }
  EXPECT_THROW(layout::fp8_row_exponents(scales.data(), 1, 1, 0, out.data()), Error);
}

}  // namespace
}  // namespace mxmoe
