// The wgmma tiles' activation order (kernels/sm90/chunk_order.hpp) against what the A fragments hold:
// in K step s = 2w + h, lane q's slots 2q, 2q+1 and 2q+8, 2q+9 are MX block q's decoded pairs 2h and
// 2h+1 of word w, and decoded pair p is elements (3 - p, 7 - p) of the word (mma/bf16_atom.cuh).
#include <gtest/gtest.h>

#include <set>

#include "kernels/sm90/chunk_order.hpp"

namespace mxmoe::sm90 {
namespace {

TEST(ChunkOrder, IsAPermutationOfTheChunk) {
  std::set<int> seen;
  for (int k = 0; k < gemv::kChunkK; ++k) {
    const int at = chunk_position(k);
    EXPECT_GE(at, 0);
    EXPECT_LT(at, gemv::kChunkK);
    seen.insert(at);
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(gemv::kChunkK));
}

TEST(ChunkOrder, EachKStepHoldsTheLanesDecodedPairs) {
  int stored[gemv::kChunkK];  // stored position -> natural element
  for (int k = 0; k < gemv::kChunkK; ++k) stored[chunk_position(k)] = k;
  for (int s = 0; s < 8; ++s) {
    const int w = s / 2, h = s % 2;
    for (int q = 0; q < 4; ++q)
      for (int half = 0; half < 2; ++half) {  // slots 2q.. (pair 2h) and 2q+8.. (pair 2h+1)
        const int pair = 2 * h + half;
        for (int i = 0; i < 2; ++i) {
          SCOPED_TRACE("step " + std::to_string(s) + ", lane q " + std::to_string(q) + ", slot half " +
                       std::to_string(half) + ", element " + std::to_string(i));
          EXPECT_EQ(stored[16 * s + 8 * half + 2 * q + i], 32 * q + 8 * w + (3 - pair) + 4 * i);
        }
      }
  }
}

TEST(ChunkOrder, RowsAreChunksInOrder) {
  for (int c = 0; c < 3; ++c)
    for (int k = 0; k < gemv::kChunkK; ++k)
      EXPECT_EQ(row_position(c * gemv::kChunkK + k), c * gemv::kChunkK + chunk_position(k)) << c << ", " << k;
}

TEST(ChunkOrder, PadsRowsToWholeChunks) {
  EXPECT_EQ(padded_k(32), 128);
  EXPECT_EQ(padded_k(128), 128);
  EXPECT_EQ(padded_k(129), 256);
  EXPECT_EQ(padded_k(2880), 2944);
}

}  // namespace
}  // namespace mxmoe::sm90
