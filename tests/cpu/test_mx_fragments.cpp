// The MX atoms' register packing (kernels/mma/mx_fragments.cuh) against the PTX ISA's fragment
// tables for mma.sync m16n8k32 with 8-bit operands, on the CPU. An emulation of the instruction reads
// A, B and the block scales out of 32 lanes' registers exactly as the tables say, and the registers
// are filled as the MX GEMM kernel fills them: weight words and scale bytes read from a record made by
// the GEMV layout's own packing (gemv::pack_expert), activation bytes through mx_act_slots. The
// result must equal a plain dot product of the dequantised values, exactly (every product and sum
// here is exact in double).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/gemv/gemv_layout.hpp"
#include "kernels/mma/mx_fragments.cuh"
#include "mxmoe/formats.hpp"
#include "test_support.hpp"

namespace mxmoe::mma {
namespace {

// One warp's operands of one m16n8k32 MMA.
struct Lanes {
  uint32_t a[32][4] = {}, b[32][2] = {}, sfa[32] = {}, sfb[32] = {};
};

uint8_t byte_of(uint32_t reg, int j) { return static_cast<uint8_t>(reg >> (8 * j)); }

// D(m, n) of the instruction, from the registers (PTX ISA, "Matrix Fragments for mma.m16n8k32", and
// "Block Scaling for mma.sync" for kind::mxf8f6f4 with scale_vec::1X, thread-id and byte-id 0).
// native: B holds e2m1 in bits [5:2] of each byte and the scales apply; else B is e4m3, no scales.
double emulate_mma(const Lanes& r, int m, int n, bool native) {
  double sum = 0;
  for (int k = 0; k < 32; ++k) {
    const int t = (k % 16) / 4, j = k % 4;
    const uint8_t a = byte_of(r.a[4 * (m % 8) + t][(m >= 8 ? 1 : 0) + (k >= 16 ? 2 : 0)], j);
    const uint8_t b = byte_of(r.b[4 * n + t][k >= 16 ? 1 : 0], j);
    double bv;
    if (native) {
      EXPECT_EQ(b & 0xC3, 0) << "the padding bits of an e2m1 container must be zero";
      bv = e2m1_to_float(static_cast<uint8_t>((b >> 2) & 0xF));
    } else {
      bv = e4m3_to_float(b);
    }
    sum += static_cast<double>(e4m3_to_float(a)) * bv;
  }
  if (!native) return sum;
  // SF_A of row m: lane 4 (m % 8) + 2 thread-id-a + m / 8; SF_B of column n: lane 4 n + thread-id-b.
  const int sa = byte_of(r.sfa[4 * (m % 8) + (m / 8)], 0), sb = byte_of(r.sfb[4 * n], 0);
  return sum * std::ldexp(1.0, sa - 127) * std::ldexp(1.0, sb - 127);
}

class MxFragments : public ::testing::TestWithParam<bool> {};

TEST_P(MxFragments, EmulatedInstructionOnPackedRegistersEqualsThePlainDotProduct) {
  const bool native = GetParam();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  // One 16-row weight tile, one chunk (4 MX blocks), in the checkpoint layout, then packed.
  const gemv::PackedShape shape = gemv::packed_shape(16, 4);
  std::vector<uint8_t> blocks(16 * 4 * 16), scales(16 * 4);
  for (auto& x : blocks) x = static_cast<uint8_t>(rng());
  for (auto& s : scales) s = static_cast<uint8_t>(100 + rng() % 50);
  std::vector<uint8_t> record(static_cast<size_t>(shape.bytes()));
  gemv::pack_expert(blocks.data(), scales.data(), shape, false, record.data());
  // 16 activation rows of e4m3 codes (no NaN) for one block, and their scales.
  std::vector<uint8_t> act(16 * 32);
  for (auto& x : act) {
    do x = static_cast<uint8_t>(rng());
    while ((x & 0x7F) == 0x7F);
  }
  std::vector<uint8_t> act_scales(16);
  for (auto& s : act_scales) s = static_cast<uint8_t>(110 + rng() % 30);

  for (int blk = 0; blk < 4; ++blk)
    for (int h = 0; h < 2; ++h) {  // the n8 group: tile rows 8h .. 8h+7
      SCOPED_TRACE("block " + std::to_string(blk) + ", rows " + std::to_string(8 * h) + "..");
      Lanes r;
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, t = lane % 4;
        // As mx_gemm_kernel.cu: word t of block blk of weight row 8h+g, straight from the record.
        uint32_t word;
        std::memcpy(&word, record.data() + gemv::record_data_offset(g, blk, h) + 4 * t, 4);
        if (native) mx_weight_slots<true>(word, r.b[lane][0], r.b[lane][1]);
        else mx_weight_slots<false>(word, r.b[lane][0], r.b[lane][1]);
        // Bytes 8t .. 8t+7 of rows g and g+8.
        uint32_t lo[2], hi[2];
        for (int half = 0; half < 2; ++half) {
          std::memcpy(&lo[half], act.data() + (g + 8 * half) * 32 + 8 * t, 4);
          std::memcpy(&hi[half], act.data() + (g + 8 * half) * 32 + 8 * t + 4, 4);
        }
        mx_act_slots(lo[0], hi[0], r.a[lane][0], r.a[lane][2]);
        mx_act_slots(lo[1], hi[1], r.a[lane][1], r.a[lane][3]);
        // Scales as the kernel passes them; the lanes the instruction does not read get noise.
        r.sfa[lane] = t == 0 ? act_scales[g] : t == 1 ? act_scales[g + 8] : static_cast<uint32_t>(rng());
        r.sfb[lane] = t == 0 ? record[gemv::record_scale_offset(g, blk, h)] : static_cast<uint32_t>(rng());
      }
      for (int m = 0; m < 16; ++m)
        for (int n = 0; n < 8; ++n) {
          const int row = 8 * h + n;  // tile row = checkpoint row (no SwiGLU reordering)
          double want = 0;
          for (int e = 0; e < 32; ++e) {
            const uint8_t byte = blocks[(row * 4 + blk) * 16 + e / 2];
            const uint8_t code = static_cast<uint8_t>(e % 2 == 0 ? byte & 0xF : byte >> 4);
            want += static_cast<double>(e4m3_to_float(act[m * 32 + e])) * e2m1_to_float(code);
          }
          if (native) {
            want *= std::ldexp(1.0, act_scales[m] - 127) * std::ldexp(1.0, scales[row * 4 + blk] - 127);
            ASSERT_EQ(emulate_mma(r, m, n, true), want) << "D(" << m << ", " << n << ")";
          } else {
            // The emulated atom's weights are e2m1 * 2^-6 as e4m3; its epilogue multiplies 2^6 back.
            ASSERT_EQ(emulate_mma(r, m, n, false) * 64.0, want) << "D(" << m << ", " << n << ")";
          }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Atoms, MxFragments, ::testing::Values(false, true),
                         [](const auto& info) { return std::string(info.param ? "Native" : "Emulated"); });

// Every e2m1 code at every position of a word lands where the slot order says, as both byte kinds.
TEST(MxFragments, WeightSlotsOfEveryCodeAtEveryPosition) {
  const int order_first[4] = {3, 2, 7, 6}, order_second[4] = {1, 0, 5, 4};
  for (int pos = 0; pos < 8; ++pos)
    for (uint32_t code = 0; code < 16; ++code) {
      const uint32_t natural = code << (4 * pos);
      uint32_t e4[2], c[2];
      mx_weight_slots<false>(kernels::pack_e2m1x8(natural), e4[0], e4[1]);
      mx_weight_slots<true>(kernels::pack_e2m1x8(natural), c[0], c[1]);
      for (int j = 0; j < 4; ++j)
        for (int reg = 0; reg < 2; ++reg) {
          const int element = reg == 0 ? order_first[j] : order_second[j];
          const uint32_t want_code = element == pos ? code : 0;
          EXPECT_EQ(byte_of(c[reg], j), want_code << 2) << "container, element " << element;
          EXPECT_EQ(static_cast<double>(e4m3_to_float(byte_of(e4[reg], j))) * 64.0, e2m1_to_float(static_cast<uint8_t>(want_code)))
              << "e4m3, element " << element << ", code " << code;
        }
    }
}

}  // namespace
}  // namespace mxmoe::mma
