// The MX atoms' register packing and scale wiring (kernels/mma/mx_fragments.cuh) against the PTX ISA's
// fragment tables for mma.sync m16n8k32 with 8-bit operands, on the CPU. An emulation of the
// instruction reads A, B and the block scales out of 32 lanes' registers exactly as the tables say,
// and the registers are filled as the MX GEMM kernel fills them, through the same functions: weight
// words and scale bytes read from a record made by the GEMV layout's own packing (gemv::pack_expert),
// activation bytes through mx_act_slots, the activation scales out of a 128-row group's swizzled
// layout (made by the library's swizzle_scales) through act_scale_index, and the scale lanes through
// native_scale_a / native_scale_b_row / emulated_scale_b_row. The result must equal a plain dot
// product of the dequantised values, exactly (every product and sum here is exact in double).
// Planted faults (swapped scale lanes, a wrong scale index) must make the comparison fail.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "layout/gemv_layout.hpp"
#include "kernels/mma/mx_fragments.cuh"
#include "mxmoe/formats.hpp"
#include "mxmoe/scale_layout.hpp"
#include "test_support.hpp"

namespace mxmoe::mma {
namespace {

// One warp's operands of one m16n8k32 MMA.
struct Lanes {
  uint32_t a[32][4] = {}, b[32][2] = {}, sfa[32] = {}, sfb[32] = {};  // sf*: the native atom's scale bytes
  double fa[32][2] = {}, fb[32][2] = {};  // the emulated atom's: rows g, g+8 and columns 2t, 2t+1
};

uint8_t byte_of(uint32_t reg, int j) { return static_cast<uint8_t>(reg >> (8 * j)); }
double e8m0(uint32_t byte) { return std::ldexp(1.0, static_cast<int>(byte & 0xFF) - 127); }

// How the kernel wires the scales; a test replaces one function to plant a fault.
struct ScaleWiring {
  uint32_t (*scale_a)(int t, uint32_t row_g, uint32_t row_g8) = native_scale_a;
  int (*scale_index)(int half, int l, int b) = act_scale_index;
};

// D(m, n) of the instruction, from the registers (PTX ISA, "Matrix Fragments for mma.m16n8k32", and
// "Block Scaling for mma.sync" for kind::mxf8f6f4 with scale_vec::1X, thread-id and byte-id 0).
// native: B holds e2m1 in bits [5:2] of each byte and the block scales apply; else B is e4m3 with no
// scales, and MxEmulatedAtom's epilogue applies (c += partial * 2^6 * fa * fb in the lane of C(m, n)).
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
  if (native)  // SF_A of row m: lane 4 (m % 8) + 2 thread-id-a + m / 8; SF_B of column n: lane 4 n + thread-id-b.
    return sum * e8m0(r.sfa[4 * (m % 8) + (m / 8)]) * e8m0(r.sfb[4 * n]);
  const int lane = 4 * (m % 8) + n / 2;  // C(m, n): c[2 (m / 8) + n % 2] of that lane
  return sum * 64.0 * r.fa[lane][m / 8] * r.fb[lane][n % 2];
}

// Random operands of one chunk (K = 128, 4 MX blocks): 16 weight rows (one tile, two n8 groups) in
// the checkpoint layout and packed, and a 128-row group of e4m3 activation codes with scales, plain
// and in the swizzled layout the kernel reads.
struct Operands {
  std::vector<uint8_t> blocks, scales, record, act, act_scales, swizzled;
  explicit Operands(uint64_t seed) {
    std::mt19937_64 rng(seed);
    const gemv::PackedShape shape = gemv::packed_shape(16, 4);
    blocks.resize(16 * 4 * 16);
    scales.resize(16 * 4);
    for (auto& x : blocks) x = static_cast<uint8_t>(rng());
    for (auto& s : scales) s = static_cast<uint8_t>(100 + rng() % 50);
    record.resize(static_cast<size_t>(shape.bytes()));
    gemv::pack_expert(blocks.data(), scales.data(), shape, false, record.data());
    act.resize(128 * 128);
    for (auto& x : act) {
      do x = static_cast<uint8_t>(rng());
      while ((x & 0x7F) == 0x7F);  // no NaN
    }
    act_scales.resize(128 * 4);
    for (auto& s : act_scales) s = static_cast<uint8_t>(110 + rng() % 30);
    swizzled.resize(static_cast<size_t>(swizzled_scale_bytes(128, 4)));
    swizzle_scales(act_scales, 128, 4, swizzled);
  }
};

// Fills the lanes as mx_gemm_kernel.cu does for m-tile i of half `half` of the 128-row group, MX block
// blk, n8 group h, and counts the outputs D(m, n) that differ from the plain dot product.
int mismatches(bool native, const ScaleWiring& wiring, uint64_t seed) {
  const Operands op(seed);
  std::mt19937_64 noise(seed + 1);
  int wrong = 0;
  for (int half = 0; half < 2; ++half)
    for (int i = 0; i < 4; ++i)
      for (int blk = 0; blk < 4; ++blk)
        for (int h = 0; h < 2; ++h) {
          Lanes r;
          for (int lane = 0; lane < 32; ++lane) {
            const int g = lane / 4, t = lane % 4;
            const int l = 16 * i + g;  // the lane's rows l and l + 8 of the half
            uint32_t word;
            std::memcpy(&word, op.record.data() + gemv::record_data_offset(g, blk, h) + 4 * t, 4);
            if (native) mx_weight_slots<true>(word, r.b[lane][0], r.b[lane][1]);
            else mx_weight_slots<false>(word, r.b[lane][0], r.b[lane][1]);
            uint32_t lo[2], hi[2];  // bytes 8t .. 8t+7 of block blk of rows l and l + 8
            for (int q = 0; q < 2; ++q) {
              const uint8_t* row = op.act.data() + (64 * half + l + 8 * q) * 128 + blk * 32 + 8 * t;
              std::memcpy(&lo[q], row, 4);
              std::memcpy(&hi[q], row + 4, 4);
            }
            mx_act_slots(lo[0], hi[0], r.a[lane][0], r.a[lane][2]);
            mx_act_slots(lo[1], hi[1], r.a[lane][1], r.a[lane][3]);
            const uint32_t sa_lo = op.swizzled[wiring.scale_index(half, l, blk)];
            const uint32_t sa_hi = op.swizzled[wiring.scale_index(half, l + 8, blk)];
            // Native: the lanes the instruction does not read (t >= 2) get noise.
            r.sfa[lane] = t < 2 ? wiring.scale_a(t, sa_lo, sa_hi) : static_cast<uint32_t>(noise());
            r.sfb[lane] = op.record[gemv::record_scale_offset(native_scale_b_row(g), blk, h)];
            r.fa[lane][0] = e8m0(sa_lo), r.fa[lane][1] = e8m0(sa_hi);
            for (int j = 0; j < 2; ++j)
              r.fb[lane][j] = e8m0(op.record[gemv::record_scale_offset(emulated_scale_b_row(t, j), blk, h)]);
          }
          for (int m = 0; m < 16; ++m)
            for (int n = 0; n < 8; ++n) {
              const int arow = 64 * half + 16 * i + m, wrow = 8 * h + n;  // tile row = checkpoint row
              double want = 0;
              for (int e = 0; e < 32; ++e) {
                const uint8_t byte = op.blocks[(wrow * 4 + blk) * 16 + e / 2];
                const uint8_t code = static_cast<uint8_t>(e % 2 == 0 ? byte & 0xF : byte >> 4);
                want += static_cast<double>(e4m3_to_float(op.act[arow * 128 + blk * 32 + e])) * e2m1_to_float(code);
              }
              want *= e8m0(op.act_scales[arow * 4 + blk]) * e8m0(op.scales[wrow * 4 + blk]);
              wrong += emulate_mma(r, m, n, native) != want;
            }
        }
  return wrong;
}

class MxFragments : public ::testing::TestWithParam<bool> {};

TEST_P(MxFragments, KernelRegistersAndScalesGiveThePlainDotProduct) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  EXPECT_EQ(mismatches(GetParam(), ScaleWiring{}, seed), 0);
}

// The check above must be able to fail: the same outputs with a wrong scale wiring differ.
TEST(MxFragments, PlantedSwappedScaleLanesFailTheComparison) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ScaleWiring swapped;
  swapped.scale_a = [](int t, uint32_t row_g, uint32_t row_g8) { return native_scale_a(t, row_g8, row_g); };
  const int wrong = mismatches(true, swapped, seed);
  EXPECT_GT(wrong, 4096) << "of 8192 outputs";  // about 29 in 30 rows get another row's scale
}

TEST_P(MxFragments, PlantedWrongScaleIndexFailsTheComparison) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ScaleWiring other_half;  // the layout of the 64-row half forgotten: half 1 reads half 0's scales
  other_half.scale_index = [](int, int l, int b) { return act_scale_index(0, l, b); };
  EXPECT_GT(mismatches(GetParam(), other_half, seed), 2048) << "of 8192 outputs (4096 in half 1)";
}

INSTANTIATE_TEST_SUITE_P(Atoms, MxFragments, ::testing::Values(false, true),
                         [](const auto& info) { return std::string(info.param ? "Native" : "Emulated"); });

// act_scale_index is the swizzled layout's offset inside the chunk the kernel copies: the 512 bytes at
// (m-tile x128 * n_cb + chunk c) * 512 of GEMM1's (K = 2880, 90 k-blocks) and any K's scales.
TEST(MxFragments, ActScaleIndexIsTheSwizzledOffsetInsideTheKernelsChunk) {
  for (const int64_t kblocks : {int64_t{4}, int64_t{90}, int64_t{13}}) {
    const int64_t n_cb = padded_kblocks(kblocks) / 4;
    for (const int64_t x128 : {int64_t{0}, int64_t{1}, int64_t{37}})
      for (int64_t c = 0; c < n_cb; ++c)
        for (int half = 0; half < 2; ++half)
          for (int l = 0; l < 64; ++l)
            for (int b = 0; b < 4; ++b) {
              const int64_t chunk0 = (x128 * n_cb + c) * 512;
              ASSERT_EQ(act_scale_index(half, l, b),
                        swizzled_scale_offset(128 * x128 + 64 * half + l, 4 * c + b, kblocks) - chunk0)
                  << "kblocks " << kblocks << ", m-tile " << x128 << ", chunk " << c << ", row " << 64 * half + l
                  << ", block " << b;
            }
  }
}

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
