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

// The half chunk (K % 128 == 64): in K step s = 2j + h (0..3), lane q's slots are the decoded pairs 2h
// and 2h + 1 of word 2 (q % 2) + j of MX block q / 2; stored elements 64..127 (the padding) stay in place.
TEST(ChunkOrder, HalfChunkStepsHoldTheLanesDecodedPairs) {
  int stored[gemv::kChunkK];
  std::set<int> seen;
  for (int k = 0; k < gemv::kChunkK; ++k) {
    stored[tail_position(k)] = k;
    seen.insert(tail_position(k));
    if (k >= gemv::kChunkK / 2) EXPECT_EQ(tail_position(k), k);
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(gemv::kChunkK));
  EXPECT_EQ(*seen.rbegin(), gemv::kChunkK - 1);
  for (int s = 0; s < 4; ++s) {
    const int j = s / 2, h = s % 2;
    for (int q = 0; q < 4; ++q)
      for (int half = 0; half < 2; ++half) {
        const int pair = 2 * h + half, word = 2 * (q % 2) + j;
        for (int i = 0; i < 2; ++i)
          EXPECT_EQ(stored[16 * s + 8 * half + 2 * q + i], 32 * (q / 2) + 8 * word + (3 - pair) + 4 * i)
              << "step " << s << ", lane q " << q << ", slot half " << half << ", element " << i;
      }
  }
}

TEST(ChunkOrder, RowsAreChunksInOrderWithTheHalfChunkLast) {
  EXPECT_FALSE(half_tail(2944));
  EXPECT_TRUE(half_tail(2880));
  EXPECT_FALSE(half_tail(2912));
  EXPECT_TRUE(half_tail(64));
  for (const int row_k : {384, 2880, 2912, 64})
    for (int c = 0; c * gemv::kChunkK < row_k; ++c)
      for (int k = 0; k < gemv::kChunkK; ++k) {
        const bool tail = row_k % gemv::kChunkK == 64 && (c + 1) * gemv::kChunkK > row_k;
        EXPECT_EQ(row_position(c * gemv::kChunkK + k, row_k), c * gemv::kChunkK + (tail ? tail_position(k) : chunk_position(k)))
            << "K " << row_k << ", chunk " << c << ", element " << k;
      }
}

TEST(ChunkOrder, PadsRowsToWholeChunks) {
  EXPECT_EQ(padded_k(32), 128);
  EXPECT_EQ(padded_k(128), 128);
  EXPECT_EQ(padded_k(129), 256);
  EXPECT_EQ(padded_k(2880), 2944);
}

}  // namespace
}  // namespace mxmoe::sm90
