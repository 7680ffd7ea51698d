// The native MX atom's register and scale packing (kernels/mma/mx_fragments.cuh, mx_atoms.cuh) against a
// second description of the instruction besides the PTX ISA tables of test_mx_fragments.cpp: CuTe's SM120
// block-scaled MMA traits, read at CUTLASS 4.7.0 (NVIDIA/cutlass 7107b05535f8977f5ecb9d01ee203205b1fd9bc4).
// Our instruction is cute::SM120::BLOCKSCALED::SM120_16x8x32_TN_VS<float_e4m3_t, float_e2m1_t, float,
// float_ue8m0_t, 32> (include/cute/arch/mma_sm120.hpp: uint32_t A[4], B[2], float C/D[4], one uint8_t SFA
// and SFB passed as uint32_t(sf) with {byte-id, thread-id} = {0, 0}). Its MMA_Traits (include/cute/atom/
// mma_traits_sm120.hpp) take ALayout, BLayout, CLayout from MMA_Traits<SM120_16x8x32_TN<...>>, which
// derives from MMA_Traits<SM80_16x8x32_S32S8S8S32_TN> (mma_traits_sm80.hpp; CLayout = SM80_16x8_Row) with
// ValTypeA = ValTypeB = uint8_t, and define SFALayout and SFBLayout. Those five layouts are restated as
// numbers in cpu/cute_sm120_layouts.hpp, with a small CuTe layout evaluator: (thread, value) -> (row, col).
//
// e2m1 in CuTe: ValTypeB = uint8_t ("The MMA accepts 8-bit inputs regardless of the types"), so one B
// value is one byte (value v = byte v % 4 of register v / 4), and fp4_shift_B moves each e2m1 code from
// bits [3:0] to bits [5:2] of its byte ("0b0000ABCD --> 0b00ABCD00") before the MMA. So each B byte must
// be exactly code << 2 (bits 7:6 and 1:0 zero) at its BLayout position: our native atom's containers.
//
// Our kernel permutes K inside each 32-wide block (mx_fragments.cuh: slot 4t+j holds element 8t+(3,2,7,6)[j])
// on A and B alike; one MMA is one MX block, so neither the dot product nor the scales see it. "Where CuTe
// says element (m, k) belongs" is therefore checked up to that shared permutation: every element of A row
// m lands in a CuTe position of row m, of B column n in one of column n, and the K slot of element index k
// is the same for every row of A and column of B (a bijection). Then the instruction, run as CuTe describes
// it on the kernel's registers, must give the plain dot products where the epilogue takes them.
// Scale lanes: SFALayout and SFBLayout have a stride-0 thread mode (replicas; the thread-id picks the one
// read). With thread-id 0, SFA's lanes t = 2, 3 are not read; CuTe fills them with rows g, g+8, while
// native_scale_a gives row g+8 to both. Harmless, and not compared.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <regex>
#include <sstream>
#include <vector>

#include "layout/gemv_layout.hpp"
#include "kernels/mma/mx_fragments.cuh"
#include "mxmoe/formats.hpp"
#include "cpu/cute_sm120_layouts.hpp"
#include "test_support.hpp"

namespace mxmoe::mma {
namespace {

using namespace test::cute;

// The {byte-id, thread-id} pairs of scale A and B in MxNativeAtom's instruction, read from its source,
// so that the check follows the kernel (operand order as CuTe's SM120_16x8x32_TN_VS passes them).
struct Selectors {
  int byte_a = -1, thread_a = -1, byte_b = -1, thread_b = -1;
};

Selectors kernel_selectors() {
  std::ifstream in(std::string(MXMOE_SOURCE_DIR) + "/src/kernels/mma/mx_atoms.cuh");
  std::stringstream text;
  text << in.rdbuf();
  const std::string src = text.str();
  const size_t at = src.find("kind::mxf8f6f4.block_scale.scale_vec::1X.f32.e4m3.e2m1.f32.ue8m0");
  EXPECT_NE(at, std::string::npos) << "MxNativeAtom's instruction is not the one the CuTe struct describes";
  std::smatch m;
  const std::string rest = at == std::string::npos ? "" : src.substr(at, 400);
  const std::regex operands(R"(%10,\s*\{\s*(\d+)\s*,\s*(\d+)\s*\}\s*,\s*%11,\s*\{\s*(\d+)\s*,\s*(\d+)\s*\})");
  Selectors s;
  if (std::regex_search(rest, m, operands))
    s = {std::stoi(m[1]), std::stoi(m[2]), std::stoi(m[3]), std::stoi(m[4])};
  else
    ADD_FAILURE() << "no {byte-id, thread-id} operands after %10 and %11 in mx_atoms.cuh";
  return s;
}

// The kernel's packing, or a planted fault in one part of it.
struct Packing {
  void (*act_slots)(uint32_t lo, uint32_t hi, uint32_t& first, uint32_t& second) = mx_act_slots;
  void (*weight_slots)(uint32_t word, uint32_t& first, uint32_t& second) = mx_weight_slots<true>;
  uint32_t (*scale_a)(int t, uint32_t row_g, uint32_t row_g8) = native_scale_a;
  int (*scale_b_row)(int g) = native_scale_b_row;
  // The word of its MX block lane t reads from its activation rows (mx_gemm_kernel.cu: bytes 8t..8t+7).
  int (*act_word)(int t) = [](int t) { return t; };
  // C register v of a lane -> (row, column) as the epilogue reads it (epilogue.cuh, store_rows, device
  // only, restated: acc[2 hr + j] is row g + 8 hr, column 2t + j).
  std::array<int, 2> (*c_element)(int lane, int v) = [](int lane, int v) {
    return std::array<int, 2>{lane / 4 + 8 * (v / 2), 2 * (lane % 4) + v % 2};
  };
};

uint8_t byte_of(uint32_t reg, int j) { return static_cast<uint8_t>(reg >> (8 * j)); }
double e8m0(uint32_t byte) { return std::ldexp(1.0, static_cast<int>(byte & 0xFF) - 127); }

// One MX block of one m16n8k32 MMA: activation codes [16][32] with row scales, and 16 weight rows of
// one k-block in the checkpoint layout (blocks [16][16], scales [16]) packed into a record;
// n8 group h uses weight rows 8h..8h+7.
struct Operands {
  std::array<std::array<uint8_t, 32>, 16> act{};
  std::array<uint8_t, 16> act_scale{};
  std::vector<uint8_t> blocks = std::vector<uint8_t>(16 * 16), scales = std::vector<uint8_t>(16), record;
  uint8_t weight(int row, int e) const {
    const uint8_t byte = blocks[row * 16 + e / 2];
    return static_cast<uint8_t>(e % 2 == 0 ? byte & 0xF : byte >> 4);
  }
  void pack() {
    const gemv::PackedShape shape = gemv::packed_shape(16, 1);
    record.assign(static_cast<size_t>(shape.bytes()), 0);
    gemv::pack_expert(blocks.data(), scales.data(), shape, false, record.data());
  }
};

// Distinct scale bytes per row, so a scale names its row.
Operands scaled_operands(std::mt19937_64& rng) {
  Operands op;
  std::array<uint8_t, 32> pool;
  std::iota(pool.begin(), pool.end(), uint8_t{110});
  std::shuffle(pool.begin(), pool.end(), rng);
  for (int r = 0; r < 16; ++r) op.act_scale[r] = pool[r], op.scales[r] = pool[16 + r];
  return op;
}

struct Warp {
  uint32_t a[32][4] = {}, b[32][2] = {}, sfa[32] = {}, sfb[32] = {};
};

// The registers as mx_gemm_kernel.cu fills them for n8 group h (the loads restated as
// test_mx_fragments.cpp does: lane (g, t) reads bytes 8t..8t+7 of rows g and g+8 and word t of its
// weight row's block from the record). Lanes the instruction does not read get what the kernel gives.
Warp fill(const Packing& p, const Operands& op, int h) {
  Warp w;
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    uint32_t word;
    std::memcpy(&word, op.record.data() + gemv::record_data_offset(g, 0, h) + 4 * t, 4);
    p.weight_slots(word, w.b[lane][0], w.b[lane][1]);
    uint32_t lo[2], hi[2];
    for (int q = 0; q < 2; ++q) {
      std::memcpy(&lo[q], op.act[g + 8 * q].data() + 8 * p.act_word(t), 4);
      std::memcpy(&hi[q], op.act[g + 8 * q].data() + 8 * p.act_word(t) + 4, 4);
    }
    p.act_slots(lo[0], hi[0], w.a[lane][0], w.a[lane][2]);
    p.act_slots(lo[1], hi[1], w.a[lane][1], w.a[lane][3]);
    w.sfa[lane] = p.scale_a(t, op.act_scale[g], op.act_scale[g + 8]);
    w.sfb[lane] = op.record[gemv::record_scale_offset(p.scale_b_row(g), 0, h)];
  }
  return w;
}

// Wrong placements found, by operand.
struct Report {
  int a = 0, b = 0, slots = 0, sfa = 0, sfb = 0, c = 0, values = 0;
  int total() const { return a + b + slots + sfa + sfb + c + values; }
};

std::ostream& operator<<(std::ostream& os, const Report& r) {
  return os << "wrong: A " << r.a << ", B " << r.b << ", K slots " << r.slots << ", SFA " << r.sfa << ", SFB "
            << r.sfb << ", C " << r.c << ", D " << r.values;
}

uint8_t random_e4m3(std::mt19937_64& rng, bool nonzero) {
  uint8_t x;
  do x = static_cast<uint8_t>(rng());
  while ((x & 0x7F) == 0x7F || (nonzero && x == 0));
  return x;
}

// One-hot A (or B): element (row, e) a random nonzero code, all else zero, must show up in exactly one
// CuTe position, of that row (column), as that byte; slot[row][e] gets its K slot. Native B: the code
// in bits [5:2] (CuTe's fp4_shift_B); emulated B: an e4m3 byte worth the e2m1 value times 2^-6.
void place(const Packing& p, std::mt19937_64& rng, bool weights, bool containers, Report& r, int (&slot)[16][32]) {
  const TvLayout& layout = weights ? kCuteB : kCuteA;
  int& wrong = weights ? r.b : r.a;
  for (int row = 0; row < 16; ++row)
    for (int e = 0; e < 32; ++e) {
      Operands op = scaled_operands(rng);
      // e2m1 code 8 is -0: a nonzero container too
      const uint8_t code = weights ? static_cast<uint8_t>(1 + rng() % 15) : random_e4m3(rng, true);
      if (weights) op.blocks[row * 16 + e / 2] = static_cast<uint8_t>(e % 2 == 0 ? code : code << 4);
      else op.act[row][e] = code;
      op.pack();
      const Warp w = fill(p, op, weights ? row / 8 : 0);
      int hits = 0;
      for (int lane = 0; lane < 32; ++lane)
        for (int v = 0; v < layout.values(); ++v) {
          const uint8_t byte = byte_of(weights ? w.b[lane][v / 4] : w.a[lane][v / 4], v % 4);
          if (byte == 0) continue;
          const auto [at_row, k] = layout(lane, v);
          ++hits;
          slot[row][e] = k;
          const bool right_byte = !weights  ? byte == code
                                  : containers ? byte == code << 2
                                               : static_cast<double>(e4m3_to_float(byte)) * 64.0 == e2m1_to_float(code);
          wrong += at_row != (weights ? row % 8 : row) || !right_byte;
        }
      wrong += hits != 1;
    }
}

// The K slot of element e must be the same in every row of A and column of B, and slots a bijection.
int slot_disagreements(const int (&sa)[16][32], const int (&sb)[16][32]) {
  int wrong = 0;
  std::array<int, 32> seen{};
  for (int e = 0; e < 32; ++e) {
    for (int m = 0; m < 16; ++m) wrong += sa[m][e] != sa[0][e] || sb[m][e] != sa[0][e];
    if (sa[0][e] >= 0 && sa[0][e] < 32) ++seen[sa[0][e]];
  }
  for (int k = 0; k < 32; ++k) wrong += seen[k] != 1;
  return wrong;
}

// The lane the instruction reads the scale of row (column) `row` from, as CuTe's scale layout and the
// thread-id selector say: the lane holding that row whose stride-0 coordinate is the selector.
int scale_lane(const TvLayout& layout, int row, int selector) {
  int found = -1, count = 0;
  for (int lane = 0; lane < 32; ++lane)
    if (layout.replica(lane) == selector && layout(lane, 0)[0] == row) found = lane, ++count;
  EXPECT_EQ(count, 1) << "row " << row << ", selector " << selector;
  return found;
}

// Scales: byte `byte-id` of each lane the instruction reads must be the scale of the row (column) CuTe
// puts there. Then D = A B with the scales, read out of the kernel's registers through CuTe's layouts
// (A, B, SFA, SFB) and written through CLayout, must equal the plain dot product at the (m, n) where the
// kernel's epilogue puts each C register, exactly (all products and sums are exact in double).
void check_scales_and_values(const Packing& p, const Selectors& s, std::mt19937_64& rng, Report& r) {
  for (int h = 0; h < 2; ++h) {
    Operands op = scaled_operands(rng);
    for (auto& row : op.act)
      for (auto& x : row) x = random_e4m3(rng, false);
    for (auto& x : op.blocks) x = static_cast<uint8_t>(rng());
    op.pack();
    const Warp w = fill(p, op, h);
    double sf_a[16], sf_b[8];
    for (int m = 0; m < 16; ++m) {
      const int lane = scale_lane(kCuteSfa, m, s.thread_a);
      if (lane < 0) return;
      for (int v = 0; v < kCuteSfa.values(); ++v) r.sfa += kCuteSfa(lane, v)[0] != m;  // one scale per lane
      const uint8_t byte = byte_of(w.sfa[lane], s.byte_a);
      r.sfa += byte != op.act_scale[m];
      sf_a[m] = e8m0(byte);
    }
    for (int n = 0; n < 8; ++n) {
      const int lane = scale_lane(kCuteSfb, n, s.thread_b);
      if (lane < 0) return;
      for (int v = 0; v < kCuteSfb.values(); ++v) r.sfb += kCuteSfb(lane, v)[0] != n;
      const uint8_t byte = byte_of(w.sfb[lane], s.byte_b);
      r.sfb += byte != op.scales[8 * h + n];
      sf_b[n] = e8m0(byte);
    }
    // Where each (row, k) and D(m, n) sits, by CuTe.
    int a_at[16][32][2], b_at[8][32][2];
    for (int lane = 0; lane < 32; ++lane) {
      for (int v = 0; v < kCuteA.values(); ++v) {
        const auto [m, k] = kCuteA(lane, v);
        a_at[m][k][0] = lane, a_at[m][k][1] = v;
      }
      for (int v = 0; v < kCuteB.values(); ++v) {
        const auto [n, k] = kCuteB(lane, v);
        b_at[n][k][0] = lane, b_at[n][k][1] = v;
      }
    }
    for (int lane = 0; lane < 32; ++lane)
      for (int v = 0; v < kCuteC.values(); ++v) {
        const auto [m, n] = kCuteC(lane, v);  // the instruction writes D(m, n) here
        const auto [km, kn] = p.c_element(lane, v);  // the epilogue takes it for (km, kn)
        r.c += m != km || n != kn;
        double d = 0, want = 0;
        for (int k = 0; k < 32; ++k) {
          const uint8_t a = byte_of(w.a[a_at[m][k][0]][a_at[m][k][1] / 4], a_at[m][k][1] % 4);
          const uint8_t b = byte_of(w.b[b_at[n][k][0]][b_at[n][k][1] / 4], b_at[n][k][1] % 4);
          d += static_cast<double>(e4m3_to_float(a)) * e2m1_to_float(static_cast<uint8_t>((b >> 2) & 0xF));
          want += static_cast<double>(e4m3_to_float(op.act[km][k])) * e2m1_to_float(op.weight(8 * h + kn, k));
        }
        d *= sf_a[m] * sf_b[n];
        want *= e8m0(op.act_scale[km]) * e8m0(op.scales[8 * h + kn]);
        r.values += d != want;
      }
  }
}

Report check(const Packing& p, const Selectors& s, uint64_t seed, bool containers = true) {
  std::mt19937_64 rng(seed);
  Report r;
  int sa[16][32], sb[16][32];
  for (auto* t : {&sa, &sb})
    for (auto& row : *t) std::fill(std::begin(row), std::end(row), -1);
  place(p, rng, false, containers, r, sa);
  place(p, rng, true, containers, r, sb);
  r.slots = slot_disagreements(sa, sb);
  if (containers) check_scales_and_values(p, s, rng, r);
  return r;
}

// The evaluator itself: A, B and C are bijections onto their tiles (CuTe's TV layouts of an MMA are),
// the scale layouts cover every (row, k) with 2 and 4 replicas, and a few points by hand.
TEST(MxAtomCute, LayoutEvaluatorReadsTheHeadersNumbers) {
  for (const TvLayout* l : {&kCuteA, &kCuteB, &kCuteC, &kCuteSfa, &kCuteSfb}) {
    ASSERT_EQ(l->threads(), 32);
    std::vector<int> hits(static_cast<size_t>(l->rows * 32), 0);
    for (int t = 0; t < 32; ++t)
      for (int v = 0; v < l->values(); ++v) {
        const auto [row, col] = l->operator()(t, v);
        ASSERT_TRUE(row >= 0 && row < l->rows && col >= 0) << t << ", " << v;
        if (col < 32) ++hits[static_cast<size_t>(col * l->rows + row)];
      }
    const int copies = l == &kCuteSfa ? 2 : l == &kCuteSfb ? 4 : 1;
    const int cols = l == &kCuteC ? 8 : 32;
    for (int i = 0; i < l->rows * cols; ++i) EXPECT_EQ(hits[static_cast<size_t>(i)], copies) << i;
  }
  EXPECT_EQ(kCuteA(5, 6), (std::array<int, 2>{1 + 8, 4 + 2}));       // lane (g 1, t 1), a1 byte 2
  EXPECT_EQ(kCuteB(30, 5), (std::array<int, 2>{7, 16 + 8 + 1}));    // lane (g 7, t 2), b1 byte 1
  EXPECT_EQ(kCuteC(7, 3), (std::array<int, 2>{1 + 8, 6 + 1}));      // lane (g 1, t 3), c3
  EXPECT_EQ(kCuteSfa.replica(6), 1);
  EXPECT_EQ(kCuteSfb.replica(6), 2);
}

TEST(MxAtomCute, KernelSelectorsAreByteAndThreadZero) {
  const Selectors s = kernel_selectors();
  // The kernel's wiring is built for these (mx_fragments.cuh); the checks below use whatever it passes.
  EXPECT_EQ(s.byte_a, 0);
  EXPECT_EQ(s.thread_a, 0);
  EXPECT_EQ(s.byte_b, 0);
  EXPECT_EQ(s.thread_b, 0);
}

TEST(MxAtomCute, NativePackingPlacesEveryElementWhereCuteSays) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Report r = check(Packing{}, kernel_selectors(), seed);
  EXPECT_EQ(r.total(), 0) << r;
}

// The emulated atom's e4m3 x e4m3 MMA has the same A, B, C layouts (SM80_16x8x32 TN); its B bytes are
// e4m3, and it applies the column scales itself, to C registers j and j + 2 of column 2t + j.
TEST(MxAtomCute, EmulatedWeightSlotsAndColumnScalesFollowCute) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Packing emulated;
  emulated.weight_slots = mx_weight_slots<false>;
  const Report r = check(emulated, kernel_selectors(), seed, false);
  EXPECT_EQ(r.total(), 0) << r;
  for (int lane = 0; lane < 32; ++lane)
    for (int v = 0; v < 4; ++v) {
      const auto [m, n] = kCuteC(lane, v);
      EXPECT_EQ(emulated_scale_b_row(lane % 4, v % 2), n) << "lane " << lane << ", c" << v;
      EXPECT_EQ(lane / 4 + 8 * (v / 2), m) << "fa_lo scales c0, c1 and fa_hi c2, c3; lane " << lane;
    }
}

// Planted faults, fed to the same checker, must be found.
TEST(MxAtomCute, PlantedFaultsFailTheComparison) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Selectors s = kernel_selectors();
  Packing lanes;  // the second slot group's byte order swapped within a pair: 0, 1, 5, 4 for 1, 0, 5, 4
  lanes.act_slots = [](uint32_t lo, uint32_t hi, uint32_t& first, uint32_t& second) {
    first = byte_perm(lo, hi, 0x6723), second = byte_perm(lo, hi, 0x4510);
  };
  const Report r1 = check(lanes, s, seed);
  EXPECT_GT(r1.slots, 0) << r1;
  EXPECT_GT(r1.values, 0) << r1;
  Packing words;  // lanes t and t ^ 1 swapped on A only: A's K slots no longer meet B's
  words.act_word = [](int t) { return t ^ 1; };
  const Report r0 = check(words, s, seed);
  EXPECT_EQ(r0.a, 0) << r0;  // every element still lands in its own row
  EXPECT_GT(r0.slots, 0) << r0;
  EXPECT_GT(r0.values, 0) << r0;
  Packing rows;  // the scale of row g + 8 in lane t = 0
  rows.scale_a = [](int t, uint32_t row_g, uint32_t row_g8) { return native_scale_a(t, row_g8, row_g); };
  const Report r2 = check(rows, s, seed);
  EXPECT_EQ(r2.sfa, 2 * 16) << r2;  // every row, in both n8 groups
  Packing columns;  // lane group g passes the scale of the neighbouring weight row
  columns.scale_b_row = [](int g) { return g ^ 1; };
  EXPECT_EQ(check(columns, s, seed).sfb, 2 * 8);
  Selectors other = s;  // the instruction told to read the lanes t = 2, 3
  other.thread_a = 1;
  EXPECT_GT(check(Packing{}, other, seed).sfa, 0);
  Packing bytes;  // e2m1 codes in bits [3:0] of the containers, as ldmatrix b4x16_p64 leaves them
  bytes.weight_slots = [](uint32_t word, uint32_t& first, uint32_t& second) {
    mx_weight_slots<true>(word, first, second);
    first >>= 2, second >>= 2;
  };
  EXPECT_GT(check(bytes, s, seed).b, 0);
  Packing c_rows;  // the epilogue taking c0, c1 for row g + 8
  c_rows.c_element = [](int lane, int v) {
    return std::array<int, 2>{lane / 4 + 8 * (1 - v / 2), 2 * (lane % 4) + v % 2};
  };
  const Report r6 = check(c_rows, s, seed);
  EXPECT_EQ(r6.c, 2 * 128) << r6;
  EXPECT_GT(r6.values, 0) << r6;
}

}  // namespace
}  // namespace mxmoe::mma
