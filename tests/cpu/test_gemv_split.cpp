// The GEMV family's split-K choice (gemv::ksplit_for, host code) for gpt-oss's shapes on a 132-SM
// Hopper: the splits that measured best on an H200 (docs/perf-log.md, "Fewer instructions per stage").
#include <gtest/gtest.h>

#include "kernels/gemv/gemv.hpp"

namespace mxmoe::gemv {
namespace {

TEST(GemvSplit, GptOssSplitsOnA132SmHopper) {
  GemvArgs a;
  a.sm_count = 132;
  a.chunks = 23;  // K = 2880 in chunks of 128
  struct Case {
    int tiles, max_active, want;
  };
  // GEMM1 has 360 16-row tiles (2 x 2880 rows), GEMM2 180; max_active = min(E, T * 4) at T = 1 .. 4.
  const Case cases[] = {{360, 4, 2},  {180, 4, 4},  {360, 8, 1},  {180, 8, 2},
                        {360, 12, 1}, {180, 12, 2}, {360, 16, 1}, {180, 16, 1}};
  for (const Case& c : cases) {
    SCOPED_TRACE("tiles " + std::to_string(c.tiles) + ", max_active " + std::to_string(c.max_active));
    a.tiles = c.tiles;
    EXPECT_EQ(ksplit_for(a, c.max_active), c.want);
  }
}

TEST(GemvSplit, TheKnobOverridesTheChoice) {
  GemvArgs a;
  a.sm_count = 132;
  a.chunks = 23;
  a.tiles = 180;
  for (const int forced : {1, 2, 4, 8}) {
    a.ksplit_override = forced;
    EXPECT_EQ(ksplit_for(a, 4), forced);
  }
}

}  // namespace
}  // namespace mxmoe::gemv
