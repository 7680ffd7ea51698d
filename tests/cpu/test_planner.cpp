// The tensor-core family's tile rule (mma::tile_for), which the GPU planner follows without a tune
// table: it must only name tiles this build has, and its tiles must grow with the rows per expert.
#include <gtest/gtest.h>

#include "kernels/mma/mma_gemm.hpp"

namespace mxmoe::mma {
namespace {

TEST(MmaPlanner, NamesOnlyBuiltTilesThatGrowWithTheRows) {
  int previous_rows = 0;
  for (double rows = 0.5; rows <= 4096; rows *= 1.25) {
    SCOPED_TRACE("rows per expert " + std::to_string(rows));
    const MmaTile tile = tile_for(rows);
    EXPECT_TRUE(tile_supported(tile)) << "m_tiles " << tile.m_tiles << (tile.swap_ab ? " swap-AB" : "");
    EXPECT_GE(block_m(tile.m_tiles), previous_rows) << "a smaller tile for more rows";
    previous_rows = block_m(tile.m_tiles);
  }
}

TEST(MmaPlanner, SwapTilesExistInEveryFullBuild) {
  if (!m_tiles_supported(1)) GTEST_SKIP() << "the minimal profile has one tile and no swap-AB form";
  for (const int m_tiles : {1, 2, 4, 8}) EXPECT_TRUE(swap_supported(m_tiles)) << m_tiles;
  EXPECT_FALSE(swap_supported(3));
  EXPECT_FALSE(swap_supported(16));
}

}  // namespace
}  // namespace mxmoe::mma
