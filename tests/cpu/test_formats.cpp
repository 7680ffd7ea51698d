// Scalar codecs and MX block quantisation (FACTS.md §2, §3). Expected values come from hand
// computation or from brute-force searches written here in double precision, independent of the
// library's bit manipulation.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "mxmoe/error.hpp"
#include "mxmoe/formats.hpp"
#include "test_support.hpp"

namespace {

using mxmoe::ScaleRule;

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

using mxmoe::test::expect_error_naming;
uint32_t fresh_seed() { return static_cast<uint32_t>(mxmoe::test::fresh_seed()); }
std::string seed_note(uint32_t seed) { return "random seed " + std::to_string(seed); }

uint32_t bits_of(float x) { return std::bit_cast<uint32_t>(x); }
float from_bits(uint32_t u) { return std::bit_cast<float>(u); }

// --- independent reference grids (double, ldexp) -------------------------------------------

// Non-negative e2m1 values by code 0..7 (FACTS.md §2).
const std::vector<double>& e2m1_grid() {
  static const std::vector<double> grid{0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
  return grid;
}

// Non-negative finite e4m3fn values by code 0..126: bias 7, 3 mantissa bits, subnormals.
const std::vector<double>& e4m3_grid() {
  static const std::vector<double> grid = [] {
    std::vector<double> g;
    for (int c = 0; c < 127; ++c) {
      const int e = c >> 3;
      const int m = c & 7;
      g.push_back(e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10));
    }
    return g;
  }();
  return grid;
}

// Nearest grid code to |v| (the grid is the element format's; values beyond the end pick the
// largest, i.e. saturate), ties to the even code (code parity = mantissa parity in both formats).
int nearest_code(const std::vector<double>& grid, double v) {
  const double a = std::fabs(v);
  int best = 0;
  for (int c = 1; c < static_cast<int>(grid.size()); ++c) {
    const double d = std::fabs(grid[c] - a);
    const double db = std::fabs(grid[best] - a);
    if (d < db || (d == db && (c % 2 == 0) && (best % 2 == 1))) best = c;
  }
  return best;
}

struct Format {
  const char* name;
  const std::vector<double>& grid;
  int emax;
  double max;
  int sign_bit;
};
const Format kFp4{"mxfp4", e2m1_grid(), 2, 6.0, 3};
const Format kFp8{"mxfp8", e4m3_grid(), 8, 448.0, 7};

// Brute-force MX quantiser: scale from log2 in double, elements by nearest-search.
uint8_t slow_scale(const float* block, ScaleRule rule, const Format& f) {
  double amax = 0;
  for (int i = 0; i < 32; ++i) {
    if (!std::isfinite(block[i])) return 0xFF;
    amax = std::max(amax, std::fabs(static_cast<double>(block[i])));
  }
  if (amax == 0) return 0;
  double s = rule == ScaleRule::Floor ? std::floor(std::log2(amax)) - f.emax : std::ceil(std::log2(amax / f.max));
  s = std::clamp(s, -127.0, 127.0);
  return static_cast<uint8_t>(s + 127);
}

std::vector<uint8_t> slow_codes(const float* block, uint8_t scale, const Format& f) {
  std::vector<uint8_t> codes(32, 0);
  if (scale == 0xFF) return codes;
  for (int i = 0; i < 32; ++i) {
    const double v = std::ldexp(static_cast<double>(block[i]), 127 - scale);  // exact
    codes[i] = static_cast<uint8_t>(nearest_code(f.grid, v) | (std::signbit(block[i]) ? 1 << f.sign_bit : 0));
  }
  return codes;
}

// --- library wrappers: one MX quantise of any number of blocks, element codes unpacked --------

struct Quantized {
  std::vector<uint8_t> codes;   // one per element (MXFP4 unpacked)
  std::vector<uint8_t> scales;  // one per block
};

Quantized quantize(const Format& f, const std::vector<float>& x, ScaleRule rule) {
  Quantized q;
  q.scales.resize(x.size() / 32);
  if (&f == &kFp4) {
    std::vector<uint8_t> packed(x.size() / 2);
    mxmoe::mxfp4_quantize(x, rule, packed, q.scales);
    for (size_t i = 0; i < x.size(); ++i) q.codes.push_back(i % 2 ? packed[i / 2] >> 4 : packed[i / 2] & 0xF);
  } else {
    q.codes.resize(x.size());
    mxmoe::mxfp8_quantize(x, rule, q.codes, q.scales);
  }
  return q;
}

std::vector<float> dequantize(const Format& f, const Quantized& q) {
  std::vector<float> x(q.codes.size());
  if (&f == &kFp4) {
    std::vector<uint8_t> packed(q.codes.size() / 2);
    for (size_t j = 0; j < packed.size(); ++j) packed[j] = static_cast<uint8_t>(q.codes[2 * j] | (q.codes[2 * j + 1] << 4));
    mxmoe::mxfp4_dequantize(packed, q.scales, x);
  } else {
    mxmoe::mxfp8_dequantize(q.codes, q.scales, x);
  }
  return x;
}

std::string rule_name(ScaleRule r) { return r == ScaleRule::Floor ? "FLOOR" : "RCEIL"; }

// --- scalar codecs ---------------------------------------------------------------------------

TEST(E2m1, EveryCodeDecodesToTheTableAndRoundTrips) {
  for (int c = 0; c < 16; ++c) {
    const float v = mxmoe::e2m1_to_float(static_cast<uint8_t>(c));
    const double expect = (c & 8 ? -1.0 : 1.0) * e2m1_grid()[c & 7];
    EXPECT_EQ(v, expect) << "code " << c;
    EXPECT_EQ(std::signbit(v), (c & 8) != 0) << "code " << c;
    EXPECT_EQ(mxmoe::float_to_e2m1(v), c) << "code " << c;
  }
}

TEST(E2m1, RoundsToNearestEvenAndSaturates) {
  struct Case { float x; int code; };
  const Case cases[] = {
      {0.25f, 0}, {0.75f, 2}, {1.25f, 2}, {1.75f, 4}, {2.5f, 4}, {3.5f, 6}, {5.0f, 6}, {7.0f, 7},
      {0.2499f, 0}, {0.2501f, 1}, {0.74f, 1}, {2.51f, 5}, {4.99f, 6}, {5.01f, 7}, {6.5f, 7}, {1e30f, 7}, {kInf, 7},
      {-0.25f, 8}, {-0.75f, 10}, {-1.25f, 10}, {-1.75f, 12}, {-2.5f, 12}, {-3.5f, 14}, {-5.0f, 14}, {-7.0f, 15},
      {-kInf, 15}, {-0.0f, 8}, {-1e-30f, 8}, {1e-40f, 0}, {kNan, 0}, {-kNan, 0},
  };
  for (const Case& c : cases) EXPECT_EQ(mxmoe::float_to_e2m1(c.x), c.code) << "x = " << c.x;
}

TEST(E2m1, MatchesBruteForceOnRandomFloats) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mag(-8.0f, 8.0f);
  std::uniform_int_distribution<int> grid_pick(0, 6);
  for (int i = 0; i < 200000; ++i) {
    float x = mag(rng);
    if (i % 4 == 0) {  // exact midpoints between neighbours, both signs
      const int c = grid_pick(rng);
      x = static_cast<float>((e2m1_grid()[c] + e2m1_grid()[c + 1]) / 2 * (i % 8 ? 1 : -1));
    }
    const int expect = nearest_code(e2m1_grid(), x) | (std::signbit(x) ? 8 : 0);
    ASSERT_EQ(mxmoe::float_to_e2m1(x), expect) << "x = " << x;
  }
}

TEST(E4m3, EveryCodeDecodesAndRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    const float v = mxmoe::e4m3_to_float(static_cast<uint8_t>(c));
    if ((c & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(v)) << "code " << c;
      EXPECT_EQ(mxmoe::float_to_e4m3(v) & 0x7F, 0x7F) << "code " << c;
      continue;
    }
    const double expect = (c & 0x80 ? -1.0 : 1.0) * e4m3_grid()[c & 0x7F];
    EXPECT_EQ(v, expect) << "code " << c;
    EXPECT_EQ(std::signbit(v), (c & 0x80) != 0) << "code " << c;
    EXPECT_EQ(mxmoe::float_to_e4m3(v), c) << "code " << c;
  }
  // Landmarks of e4m3fn.
  EXPECT_EQ(mxmoe::e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(mxmoe::e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(mxmoe::e4m3_to_float(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(mxmoe::e4m3_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(mxmoe::e4m3_to_float(0xFE), -448.0f);
}

TEST(E4m3, RoundsToNearestEvenAndSaturates) {
  struct Case { float x; int code; };
  const float sub = std::ldexp(1.0f, -9);  // smallest subnormal
  const Case cases[] = {
      {1.0f + 1.0f / 16, 0x38},       // tie 1 | 1.125 -> 1 (even mantissa)
      {1.0f + 3.0f / 16, 0x3A},       // tie 1.125 | 1.25 -> 1.25
      {1.0f + 1.0f / 16 + 1e-6f, 0x39},
      {15.5f, 0x58},                  // tie 15 | 16 -> 16, carry into the next binade
      {sub / 2, 0x00},                // tie 0 | 2^-9 -> 0
      {sub * 1.5f, 0x02},             // tie 2^-9 | 2^-8 -> 2^-8
      {sub * 2.5f, 0x02},             // tie 2*2^-9 | 3*2^-9 -> even
      {sub * 7.5f, 0x08},             // tie largest subnormal | smallest normal -> normal
      {sub / 2 * 1.0001f, 0x01},
      {432.0f, 0x7E},                 // tie 416 | 448 -> 448 (even)
      {464.0f, 0x7E}, {480.0f, 0x7E}, {1e30f, 0x7E}, {kInf, 0x7E}, {3.4e38f, 0x7E},
      {-464.0f, 0xFE}, {-kInf, 0xFE}, {-(1.0f + 3.0f / 16), 0xBA},
      {-0.0f, 0x80}, {-1e-30f, 0x80}, {1e-40f, 0x00},
      {kNan, 0x7F}, {-kNan, 0xFF},
  };
  for (const Case& c : cases) EXPECT_EQ(mxmoe::float_to_e4m3(c.x), c.code) << "x = " << c.x;
}

TEST(E4m3, MatchesBruteForceOnRandomFloats) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> expo(-14, 10);
  std::uniform_int_distribution<int> grid_pick(0, 125);
  for (int i = 0; i < 200000; ++i) {
    float x = std::ldexp(unit(rng), expo(rng));
    if (i % 4 == 0) {
      const int c = grid_pick(rng);
      x = static_cast<float>((e4m3_grid()[c] + e4m3_grid()[c + 1]) / 2 * (i % 8 ? 1 : -1));
    }
    const int expect = nearest_code(e4m3_grid(), x) | (std::signbit(x) ? 0x80 : 0);
    ASSERT_EQ(mxmoe::float_to_e4m3(x), expect) << "x = " << x;
  }
}

TEST(E8m0, EveryCodeDecodesAndRoundTripsThroughTheBlockScale) {
  // There is no scalar e8m0 encoder; the block-scale rule with a unit element format
  // (emax 0, max 1) maps amax = 2^e to byte e + 127 under both rules.
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> frac(0.0f, 1.0f);
  for (int c = 0; c < 256; ++c) {
    const float v = mxmoe::e8m0_to_float(static_cast<uint8_t>(c));
    if (c == 0xFF) {
      EXPECT_TRUE(std::isnan(v));
    } else {
      EXPECT_EQ(v, std::ldexp(1.0, c - 127)) << "code " << c;
    }
    std::vector<float> block(32);
    for (float& b : block) b = v * frac(rng) * (frac(rng) < 0.5f ? -1.0f : 1.0f);
    block[rng() % 32] = (c % 2) ? v : -v;
    for (ScaleRule rule : {ScaleRule::Floor, ScaleRule::Rceil}) {
      EXPECT_EQ(mxmoe::mx_block_scale(block, rule, 0, 1.0f), c) << "code " << c << " " << rule_name(rule);
    }
  }
}

TEST(Bf16, EveryPatternRoundTrips) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = mxmoe::bf16_to_float(static_cast<uint16_t>(b));
    EXPECT_EQ(bits_of(f), b << 16);
    const uint16_t r = mxmoe::float_to_bf16(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(mxmoe::bf16_to_float(r))) << "pattern " << b;
      EXPECT_EQ(r, b | 0x0040) << "NaN keeps sign and payload, quieted: pattern " << b;
    } else {
      ASSERT_EQ(r, b) << "pattern " << b;
    }
  }
}

TEST(Bf16, RoundsToNearestEven) {
  struct Case { uint32_t f; uint16_t bf; };
  const Case cases[] = {
      {0x3F808000u, 0x3F80},  // 1 + 2^-8: tie -> even (down)
      {0x3F818000u, 0x3F82},  // 1 + 3*2^-8: tie -> even (up)
      {0x3F808001u, 0x3F81},  // just above the tie
      {0x3F807FFFu, 0x3F80},  // just below the tie
      {0xBF818000u, 0xBF82},  // negative tie
      {0x7F7FFFFFu, 0x7F80},  // FLT_MAX rounds to inf (above the last finite bf16's half step)
      {0x7F7F7FFFu, 0x7F7F},
      {0x00008000u, 0x0000},  // subnormal tie -> even
      {0x00018000u, 0x0002},
      {0x7F800000u, 0x7F80}, {0xFF800000u, 0xFF80},
      {0x7F800001u, 0x7FC0},  // signalling NaN with a payload truncated to zero stays NaN
      {0xFFC00000u, 0xFFC0},
  };
  for (const Case& c : cases) EXPECT_EQ(mxmoe::float_to_bf16(from_bits(c.f)), c.bf) << std::hex << "bits 0x" << c.f;
}

TEST(Bf16, MatchesBruteForceOnRandomFloats) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937 rng(seed);
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = static_cast<uint32_t>(rng());
    if (i % 3 == 0) u = (u & 0xFFFF0000u) | 0x8000u;  // exact ties
    const float x = from_bits(u);
    if (!std::isfinite(x)) continue;
    // Candidates: truncation and the next bf16 away from zero; pick the nearer, ties to even.
    const uint32_t lo = u & 0xFFFF0000u;
    const uint32_t hi = lo + 0x10000u;
    const double dlo = std::fabs(static_cast<double>(x) - from_bits(lo));
    const double hi_value = ((hi & 0x7F800000u) == 0x7F800000u)
                                ? std::ldexp(std::signbit(x) ? -1.0 : 1.0, 128)  // past FLT_MAX: 2^128 (inf)
                                : static_cast<double>(from_bits(hi));
    const double dhi = std::fabs(static_cast<double>(x) - hi_value);
    const uint32_t expect = (dlo < dhi || (dlo == dhi && ((lo >> 16) & 1) == 0)) ? lo : hi;
    ASSERT_EQ(mxmoe::float_to_bf16(x), expect >> 16) << std::hex << "bits 0x" << u;
  }
}

// --- MX blocks -------------------------------------------------------------------------------

// Random finite block of one of several shapes (never all zero).
std::vector<float> random_block(std::mt19937& rng, const Format& f, int kind) {
  std::vector<float> b(32);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  switch (kind) {
    case 0: {  // one binade region with a spread of magnitudes
      const int base = std::uniform_int_distribution<int>(-140, 120)(rng);
      for (float& x : b) x = std::ldexp(unit(rng), base - static_cast<int>(rng() % 12));
      break;
    }
    case 1: {  // exact element-grid midpoints times a scale, plus the block max: every element a tie
      const int s = std::uniform_int_distribution<int>(-127, 110)(rng);
      const int n = static_cast<int>(f.grid.size());
      for (float& x : b) {
        const int c = static_cast<int>(rng() % (n - 1));
        x = static_cast<float>(std::ldexp((f.grid[c] + f.grid[c + 1]) / 2, s)) * (rng() % 2 ? 1.0f : -1.0f);
      }
      b[rng() % 32] = static_cast<float>(std::ldexp(f.max, s));
      break;
    }
    case 2: {  // arbitrary finite bit patterns (subnormals to FLT_MAX in one block)
      for (float& x : b) {
        uint32_t u;
        do u = static_cast<uint32_t>(rng()); while ((u & 0x7F800000u) == 0x7F800000u);
        x = from_bits(u);
      }
      break;
    }
    default: {  // float subnormals mixed with the smallest normals
      for (float& x : b) x = std::ldexp(unit(rng), -126 - static_cast<int>(rng() % 20));
      break;
    }
  }
  b[0] = b[0] == 0.0f ? 1e-30f : b[0];
  return b;
}

TEST(MxBlock, QuantiseMatchesBruteForce) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937 rng(seed);
  for (const Format* f : {&kFp4, &kFp8}) {
    for (ScaleRule rule : {ScaleRule::Floor, ScaleRule::Rceil}) {
      SCOPED_TRACE(std::string(f->name) + " " + rule_name(rule));
      constexpr int kBlocks = 4000;
      std::vector<float> x;
      for (int b = 0; b < kBlocks; ++b) {
        const auto block = random_block(rng, *f, b % 4);
        x.insert(x.end(), block.begin(), block.end());
      }
      const Quantized q = quantize(*f, x, rule);
      const std::vector<float> back = dequantize(*f, q);
      for (int b = 0; b < kBlocks; ++b) {
        const float* block = x.data() + 32 * b;
        const uint8_t scale = slow_scale(block, rule, *f);
        ASSERT_EQ(q.scales[b], scale) << "block " << b << " kind " << b % 4;
        const auto codes = slow_codes(block, scale, *f);
        for (int i = 0; i < 32; ++i) {
          ASSERT_EQ(q.codes[32 * b + i], codes[i]) << "block " << b << " element " << i << " x = " << block[i];
          // Exact in double, then rounded to float: past FLT_MAX that is inf (RCEIL can round an
          // element of a block near FLT_MAX up to 2^128).
          const double mag = std::ldexp(f->grid[codes[i] & ((1 << f->sign_bit) - 1)], scale - 127);
          const auto expect = static_cast<float>((codes[i] >> f->sign_bit) ? -mag : mag);
          ASSERT_EQ(back[32 * b + i], expect) << "block " << b << " element " << i;
        }
      }
    }
  }
}

TEST(MxBlock, QuantiseOfDequantiseIsTheIdentity) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937 rng(seed);
  for (const Format* f : {&kFp4, &kFp8}) {
    const int max_code = static_cast<int>(f->grid.size()) - 1;
    const int sign = 1 << f->sign_bit;
    // Largest scale byte whose block max is still a finite float.
    const int top_byte = f == &kFp4 ? 252 : 246;
    for (ScaleRule rule : {ScaleRule::Floor, ScaleRule::Rceil}) {
      SCOPED_TRACE(std::string(f->name) + " " + rule_name(rule));
      constexpr int kBlocks = 2000;
      Quantized in;
      for (int b = 0; b < kBlocks; ++b) {
        in.scales.push_back(static_cast<uint8_t>(b < 2 ? b * top_byte : rng() % (top_byte + 1)));
        for (int i = 0; i < 32; ++i) in.codes.push_back(static_cast<uint8_t>(rng() % (max_code + 1) | (rng() % 2 ? sign : 0)));
        // With one element at the format's max, the scale and every code are recovered exactly.
        if (b % 2 == 0) in.codes[32 * b + rng() % 32] = static_cast<uint8_t>(max_code | (rng() % 2 ? sign : 0));
      }
      const std::vector<float> x = dequantize(*f, in);
      const Quantized out = quantize(*f, x, rule);
      const std::vector<float> again = dequantize(*f, out);
      for (int b = 0; b < kBlocks; ++b) {
        for (int i = 0; i < 32; ++i) {
          const float v = x[32 * b + i];
          if (again[32 * b + i] == v) continue;
          // The one exception, OCP FLOOR on e4m3: a block max of significand 1.875 one binade
          // below the top picks a scale under which it is 480, and 480 clips to 448.
          ASSERT_TRUE(f == &kFp8 && rule == ScaleRule::Floor) << "block " << b << " element " << i << " x = " << v;
          const float clip = static_cast<float>(std::ldexp(448.0, out.scales[b] - 127));
          ASSERT_GT(std::fabs(v), clip) << "block " << b << " element " << i;
          ASSERT_EQ(again[32 * b + i], std::copysign(clip, v)) << "block " << b << " element " << i;
        }
        if (b % 2 == 0) {
          ASSERT_EQ(out.scales[b], in.scales[b]) << "block " << b;
          for (int i = 0; i < 32; ++i) ASSERT_EQ(out.codes[32 * b + i], in.codes[32 * b + i]) << "block " << b;
        }
      }
    }
  }
}

// A block with the given leading elements, the rest random small grid values times 2^k.
std::vector<float> crafted_block(std::mt19937& rng, std::vector<double> lead, int k) {
  std::vector<float> b(32);
  for (size_t i = 0; i < 32; ++i) {
    const double v = i < lead.size() ? lead[i] : (rng() % 2 ? 1.0 : -1.0) * e2m1_grid()[1 + rng() % 5];
    b[i] = static_cast<float>(std::ldexp(v, k));
  }
  return b;
}

TEST(MxBlock, FloorAndRceilOnCraftedBlocks) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937 rng(seed);
  const int random_k = std::uniform_int_distribution<int>(-120, 110)(rng);
  for (int k : {-127, -1, 0, 3, 110, random_k}) {
    SCOPED_TRACE("k = " + std::to_string(k));
    const uint8_t byte = static_cast<uint8_t>(k + 127);
    // MXFP4, amax = 6*2^k exactly: both rules give 2^k, nothing clips.
    for (ScaleRule rule : {ScaleRule::Floor, ScaleRule::Rceil}) {
      const auto q = quantize(kFp4, crafted_block(rng, {6, -1, 0.75, 0.25, -5, 2.5}, k), rule);
      EXPECT_EQ(q.scales[0], byte) << rule_name(rule);
      const std::vector<uint8_t> lead{7, 10, 2, 0, 14, 4};  // 6, -1, 0.75->1, 0.25->0, -5->-4, 2.5->2
      EXPECT_TRUE(std::equal(lead.begin(), lead.end(), q.codes.begin())) << rule_name(rule);
    }
    // MXFP4, amax a power of two (4*2^k): both rules give 2^k.
    for (ScaleRule rule : {ScaleRule::Floor, ScaleRule::Rceil}) {
      const auto q = quantize(kFp4, crafted_block(rng, {-4, 3}, k), rule);
      EXPECT_EQ(q.scales[0], byte) << rule_name(rule);
      EXPECT_EQ(q.codes[0], 14);
      EXPECT_EQ(q.codes[1], 5);
    }
    // MXFP4, amax just above 6*2^k: FLOOR keeps 2^k and clips to 6; RCEIL goes to 2^(k+1).
    {
      const std::vector<double> lead{6 * (1 + std::ldexp(1.0, -20)), 1, 0.75, -3, 5.5, 0.5};
      const auto fl = quantize(kFp4, crafted_block(rng, lead, k), ScaleRule::Floor);
      EXPECT_EQ(fl.scales[0], byte);
      const std::vector<uint8_t> fl_lead{7, 2, 2, 13, 7, 1};  // 6 (clipped), 1, 1, -3, 6, 0.5
      EXPECT_TRUE(std::equal(fl_lead.begin(), fl_lead.end(), fl.codes.begin()));
      const auto rc = quantize(kFp4, crafted_block(rng, lead, k), ScaleRule::Rceil);
      EXPECT_EQ(rc.scales[0], byte + 1);
      const std::vector<uint8_t> rc_lead{5, 1, 1, 11, 5, 0};  // 3, 0.5, 0.375->0.5, -1.5, 2.75->3, 0.25->0
      EXPECT_TRUE(std::equal(rc_lead.begin(), rc_lead.end(), rc.codes.begin()));
    }
    if (k > 110) continue;
    // MXFP8, amax = 448*2^k and 256*2^k: both rules give 2^k.
    for (ScaleRule rule : {ScaleRule::Floor, ScaleRule::Rceil}) {
      for (double amax : {448.0, 256.0, -256.0}) {
        const auto q = quantize(kFp8, crafted_block(rng, {amax, 1, std::ldexp(1.0, -9)}, k), rule);
        EXPECT_EQ(q.scales[0], byte) << rule_name(rule) << " amax " << amax;
        EXPECT_EQ(q.codes[0], amax == 448.0 ? 0x7E : amax > 0 ? 0x78 : 0xF8);
        EXPECT_EQ(q.codes[1], 0x38);
        EXPECT_EQ(q.codes[2], 0x01);
      }
    }
    // MXFP8, amax just above 448*2^k, and 480*2^k: FLOOR clips to 448, RCEIL goes a binade up.
    for (double amax : {448 * (1 + std::ldexp(1.0, -20)), 480.0}) {
      const std::vector<double> lead{amax, 1, std::ldexp(1.0, -9), -3 * std::ldexp(1.0, -9)};
      const auto fl = quantize(kFp8, crafted_block(rng, lead, k), ScaleRule::Floor);
      EXPECT_EQ(fl.scales[0], byte);
      const std::vector<uint8_t> fl_lead{0x7E, 0x38, 0x01, 0x83};
      EXPECT_TRUE(std::equal(fl_lead.begin(), fl_lead.end(), fl.codes.begin())) << "amax " << amax;
      const auto rc = quantize(kFp8, crafted_block(rng, lead, k), ScaleRule::Rceil);
      EXPECT_EQ(rc.scales[0], byte + 1);
      // 224 or 240, 0.5, 2^-10 -> 0 (tie), -1.5*2^-9 -> -2^-8 (tie to even)
      const std::vector<uint8_t> rc_lead{static_cast<uint8_t>(amax == 480.0 ? 0x77 : 0x76), 0x30, 0x00, 0x82};
      EXPECT_TRUE(std::equal(rc_lead.begin(), rc_lead.end(), rc.codes.begin())) << "amax " << amax;
    }
  }
}

TEST(MxBlock, LargestBlocks) {
  // amax = FLT_MAX = (2 - 2^-23) * 2^127. FLOOR: 2^125, element ~8 clips to 6.
  // RCEIL: significand > 1.5, so 2^126; element ~4 rounds to 4.
  std::vector<float> x(32, 1.0f);
  x[5] = std::numeric_limits<float>::max();
  const auto fl = quantize(kFp4, x, ScaleRule::Floor);
  EXPECT_EQ(fl.scales[0], 252);
  EXPECT_EQ(fl.codes[5], 7);
  const auto rc = quantize(kFp4, x, ScaleRule::Rceil);
  EXPECT_EQ(rc.scales[0], 253);
  EXPECT_EQ(rc.codes[5], 6);
  EXPECT_EQ(dequantize(kFp4, rc)[5], kInf);  // 4 * 2^126 = 2^128 is past the float range
  const auto f8 = quantize(kFp8, x, ScaleRule::Floor);  // 2^119, element ~512 clips to 448
  EXPECT_EQ(f8.scales[0], 246);
  EXPECT_EQ(f8.codes[5], 0x7E);
  const auto r8 = quantize(kFp8, x, ScaleRule::Rceil);  // significand > 1.75: 2^120, element ~256
  EXPECT_EQ(r8.scales[0], 247);
  EXPECT_EQ(r8.codes[5], 0x78);
  EXPECT_EQ(dequantize(kFp8, r8)[5], kInf);  // 256 * 2^120 = 2^128
  EXPECT_EQ(dequantize(kFp8, f8)[5], 448.0f * std::ldexp(1.0f, 119));
}

TEST(MxBlock, AllZeroBlocks) {
  for (float zero : {0.0f, -0.0f}) {
    const std::vector<float> x(64, zero);
    for (const Format* f : {&kFp4, &kFp8}) {
      for (ScaleRule rule : {ScaleRule::Floor, ScaleRule::Rceil}) {
        const auto q = quantize(*f, x, rule);
        EXPECT_EQ(q.scales, std::vector<uint8_t>(2, 0)) << f->name;
        for (uint8_t c : q.codes) EXPECT_EQ(c, std::signbit(zero) ? 1 << f->sign_bit : 0) << f->name;  // +-0
        for (float v : dequantize(*f, q)) EXPECT_EQ(v, 0.0f);
      }
    }
  }
  // Packed MXFP4 bytes of a +0 block are all zero.
  std::vector<uint8_t> packed(16, 0xAB), scales(1, 0xAB);
  mxmoe::mxfp4_quantize(std::vector<float>(32, 0.0f), ScaleRule::Floor, packed, scales);
  EXPECT_EQ(packed, std::vector<uint8_t>(16, 0));
  EXPECT_EQ(scales[0], 0);
}

TEST(MxBlock, SubnormalInputs) {
  for (ScaleRule rule : {ScaleRule::Floor, ScaleRule::Rceil}) {
    SCOPED_TRACE(rule_name(rule));
    // 1e-40f = 71362 * 2^-149: the scale clamps at 2^-127 and the element is 71362 * 2^-22 ~ 0.017.
    std::vector<float> x(32, 1e-40f);
    x[1] = -1e-40f;
    auto q4 = quantize(kFp4, x, rule);
    EXPECT_EQ(q4.scales[0], 0);
    EXPECT_EQ(q4.codes[0], 0);  // 0.017 < 0.25
    EXPECT_EQ(q4.codes[1], 8);
    auto q8 = quantize(kFp8, x, rule);
    EXPECT_EQ(q8.scales[0], 0);
    EXPECT_EQ(q8.codes[0], 0x09);  // 71362/8192 = 8.71 units of 2^-9 -> 9 -> exponent 1, mantissa 1
    EXPECT_EQ(q8.codes[1], 0x89);
    // 5 * 2^-136: exactly the e4m3 subnormal 5 * 2^-9 under the clamped scale 2^-127.
    x.assign(32, static_cast<float>(std::ldexp(5.0, -136)));
    q8 = quantize(kFp8, x, rule);
    EXPECT_EQ(q8.scales[0], 0);
    EXPECT_EQ(q8.codes[0], 0x05);
    EXPECT_EQ(dequantize(kFp8, q8)[0], x[0]);
    // Subnormal elements under a normal scale: amax 6 * 2^-125 (byte 2).
    x.assign(32, static_cast<float>(std::ldexp(1.0, -124)));  // 2
    x[0] = static_cast<float>(std::ldexp(6.0, -125));
    x[1] = static_cast<float>(std::ldexp(1.0, -127));  // 0.25 -> 0 (tie)
    x[2] = static_cast<float>(std::ldexp(3.0, -128));  // 0.375 -> 0.5
    x[3] = -static_cast<float>(std::ldexp(3.0, -127)); // -0.75 -> -1 (tie)
    q4 = quantize(kFp4, x, rule);
    EXPECT_EQ(q4.scales[0], 2);
    const std::vector<uint8_t> lead{7, 0, 1, 10, 4};
    EXPECT_TRUE(std::equal(lead.begin(), lead.end(), q4.codes.begin()));
  }
}

TEST(MxBlock, NonFiniteBlocksBecomeNan) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(-3.0f, 3.0f);
  for (float bad : {kInf, -kInf, kNan}) {
    for (const Format* f : {&kFp4, &kFp8}) {
      for (ScaleRule rule : {ScaleRule::Floor, ScaleRule::Rceil}) {
        std::vector<float> x(96);
        for (float& v : x) v = unit(rng);
        x[32 + rng() % 32] = bad;  // the middle block only
        const auto q = quantize(*f, x, rule);
        EXPECT_NE(q.scales[0], 0xFF);
        EXPECT_EQ(q.scales[1], 0xFF) << f->name << " " << rule_name(rule) << " " << bad;
        EXPECT_NE(q.scales[2], 0xFF);
        const auto back = dequantize(*f, q);
        for (int i = 0; i < 96; ++i) EXPECT_EQ(std::isnan(back[i]), i >= 32 && i < 64) << "element " << i;
      }
    }
  }
  // Any codes under a 0xFF scale dequantise to NaN, zero codes included.
  Quantized q{std::vector<uint8_t>(32), std::vector<uint8_t>{0xFF}};
  for (int i = 0; i < 32; ++i) q.codes[i] = static_cast<uint8_t>(i % 16);
  for (float v : dequantize(kFp4, q)) EXPECT_TRUE(std::isnan(v));
  for (float v : dequantize(kFp8, q)) EXPECT_TRUE(std::isnan(v));
}

TEST(MxBlock, Mxfp4NibbleOrder) {
  std::vector<float> x(32, 0.5f);
  x[0] = 1.0f;   // code 2, low nibble of byte 0
  x[1] = -6.0f;  // code 15, high nibble of byte 0
  x[31] = 3.0f;  // code 5, high nibble of byte 15
  std::vector<uint8_t> packed(16), scales(1);
  mxmoe::mxfp4_quantize(x, ScaleRule::Floor, packed, scales);
  EXPECT_EQ(scales[0], 127);
  EXPECT_EQ(packed[0], 0xF2);
  EXPECT_EQ(packed[1], 0x11);
  EXPECT_EQ(packed[15], 0x51);
  std::vector<float> back(32);
  mxmoe::mxfp4_dequantize(packed, scales, back);
  EXPECT_EQ(back, x);
}


TEST(MxBlock, BadArgumentsThrow) {
  std::vector<float> x(64, 1.0f), x_odd(48, 1.0f);
  std::vector<uint8_t> packed(32), codes(64), scales(2);
  std::vector<uint8_t> short_packed(31), short_codes(63), short_scales(1), long_scales(3);
  const auto r = ScaleRule::Floor;
  expect_error_naming([&] { mxmoe::mxfp4_quantize(x_odd, r, std::span(packed).first(24), short_scales); }, "x.size()");
  expect_error_naming([&] { mxmoe::mxfp4_quantize(x, r, short_packed, scales); }, "packed");
  expect_error_naming([&] { mxmoe::mxfp4_quantize(x, r, packed, short_scales); }, "scales");
  expect_error_naming([&] { mxmoe::mxfp4_quantize(x, r, packed, long_scales); }, "scales");
  expect_error_naming([&] { mxmoe::mxfp4_dequantize(short_packed, scales, x); }, "packed");
  expect_error_naming([&] { mxmoe::mxfp4_dequantize(packed, short_scales, x); }, "scales");
  expect_error_naming([&] { mxmoe::mxfp4_dequantize(std::span(packed).first(24), short_scales, x_odd); }, "x.size()");
  expect_error_naming([&] { mxmoe::mxfp8_quantize(x, r, short_codes, scales); }, "codes");
  expect_error_naming([&] { mxmoe::mxfp8_quantize(x, r, codes, long_scales); }, "scales");
  expect_error_naming([&] { mxmoe::mxfp8_quantize(x_odd, r, std::span(codes).first(48), short_scales); }, "x.size()");
  expect_error_naming([&] { mxmoe::mxfp8_dequantize(short_codes, scales, x); }, "codes");
  expect_error_naming([&] { mxmoe::mxfp8_dequantize(codes, short_scales, x); }, "scales");
  expect_error_naming([&] { mxmoe::mx_block_scale(std::span(x).first(31), r, 2, 6.0f); }, "block");
  expect_error_naming([&] { mxmoe::mx_block_scale(std::span(x).first(32), r, 3, 6.0f); }, "emax_elem");
  expect_error_naming([&] { mxmoe::mx_block_scale(std::span(x).first(32), r, 2, -6.0f); }, "elem_max");
  expect_error_naming([&] { mxmoe::mx_block_scale(std::span(x).first(32), r, 2, kInf); }, "elem_max");
}

}  // namespace
