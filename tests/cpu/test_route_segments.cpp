// The multi-block route's segments (routing/routing.hpp): every route block's 16 tokens inside one
// segment, at least 64 tokens a segment, never more than kMaxRouteSegments segments (the rank
// launch's grid, whose every block reads the whole count table), and no larger than that requires.
#include <gtest/gtest.h>

#include "routing/routing.hpp"

namespace mxmoe::routing {
namespace {

TEST(RouteSegments, WholeRouteBlocksAndBoundedCount) {
  for (const int64_t tokens : {int64_t{9}, int64_t{16}, int64_t{63}, int64_t{64}, int64_t{65}, int64_t{1000}, int64_t{4096},
                               int64_t{8192}, int64_t{8193}, int64_t{12345}, int64_t{100000}, int64_t{1} << 22}) {
    SCOPED_TRACE("T = " + std::to_string(tokens));
    const int per = route_segment_tokens(tokens);
    EXPECT_EQ(per % 16, 0);
    EXPECT_GE(per, 64);
    const int64_t segments = (tokens + per - 1) / per;
    EXPECT_LE(segments, kMaxRouteSegments);
    if (per > 64) EXPECT_GT((tokens + per - 17) / (per - 16), kMaxRouteSegments) << "16 fewer would also do";
  }
}

}  // namespace
}  // namespace mxmoe::routing
