// The GEMV decode stream (kernels/gemv/resident.hpp) as the planner sees it: where GEMM2's weights fit the
// SMs' shared memory it runs at T = 1 (gpt-oss on a 132-SM Hopper), nowhere else by default; the layout
// arithmetic the launcher and the planner share; the reasons it does not fit; the plan override.
#include <gtest/gtest.h>

#include <string>

#include "kernels/gemv/resident.hpp"
#include "kernels/gemv/resident_layout.hpp"
#include "mxmoe/config.hpp"
#include "mxmoe/plan_override.hpp"
#include "plan/planner.hpp"
#include "planner_test_support.hpp"
#include "test_support.hpp"

namespace mxmoe::plan {
namespace {

gemv::ResidentShape gpt_oss_shape(int64_t tokens, int slots, int blocks, int intermediate = 2880) {
  gemv::ResidentShape s;
  s.w1 = gemv::packed_shape(2 * int64_t{intermediate}, 2880 / 32);
  s.w2 = gemv::packed_shape(2880, intermediate / 32);
  s.tokens = tokens, s.slots = slots, s.blocks = blocks;
  return s;
}

// gpt-oss at T = 1 on 132 SMs: GEMM1's 4 x 360 tiles are 10.9 per SM (3 rounds of 16 warps at split 4);
// GEMM2's 4 x 180 tiles x 4 splits are 21.8 units per SM, the longest split 6 chunks of 1088 bytes.
TEST(ResidentLayout, GptOssAtOneTokenOn132Sms) {
  const gemv::ResidentLayout l = gemv::resident_layout(gpt_oss_shape(1, 4, 132));
  EXPECT_EQ(l.items1, 11);
  EXPECT_EQ(l.rounds1, 3);
  EXPECT_EQ(l.units2, 22);
  EXPECT_EQ(l.unit_stride, 6 * gemv::kChunkBytes);
  EXPECT_EQ(l.ring_offset, 6016);  // one staged row of 23 chunks: 23 * 256 + 64, in 128-byte steps
  EXPECT_EQ(l.resident_offset, 6016 + 16 * 2 * 2 * gemv::kChunkBytes);
  EXPECT_EQ(l.total, l.resident_offset + 22 * 6 * gemv::kChunkBytes);
  EXPECT_EQ(gemv::resident_smem_bytes(gpt_oss_shape(1, 4, 132)), static_cast<size_t>(l.total));
  EXPECT_LE(l.total + kStaticSmemAllowance, 232448) << "an H100's or H200's 227 KB per block";
}

TEST(ResidentLayout, SaysWhyAShapeDoesNotFit) {
  const size_t hopper = 232448;
  EXPECT_EQ(gemv::resident_misfit(gpt_oss_shape(1, 4, 132), hopper, kStaticSmemAllowance), nullptr);
  const auto why = [&](const gemv::ResidentShape& s, size_t smem) {
    const char* m = gemv::resident_misfit(s, smem, kStaticSmemAllowance);
    return std::string(m ? m : "");
  };
  EXPECT_NE(why(gpt_oss_shape(2, 8, 132), hopper).find("registers"), std::string::npos) << "22 GEMM1 tiles per SM";
  EXPECT_NE(why(gpt_oss_shape(1, 4, 132), 101376).find("does not fit shared memory"), std::string::npos)
      << "SM120/SM121's 99 KB";
  EXPECT_NE(why(gpt_oss_shape(3, 12, 132), hopper).find("T is outside"), std::string::npos);
  EXPECT_NE(why(gpt_oss_shape(1, 4, 48), hopper).find("registers"), std::string::npos) << "30 tiles per SM";
  EXPECT_NE(why(gpt_oss_shape(1, 4, 0), hopper).find("no SMs"), std::string::npos);
  gemv::ResidentShape eight = gpt_oss_shape(1, 8, 132);
  eight.top_k = 8;  // 8 pairs x 4 splits
  EXPECT_NE(why(eight, hopper).find("combine's registers"), std::string::npos);
  // Tensor-parallel ranks: GEMM2's K shrinks with the slice. Half of it at T = 2 misses by 900 bytes
  // (two staged token rows); a quarter fits.
  EXPECT_NE(why(gpt_oss_shape(2, 8, 132, 1440), hopper).find("does not fit shared memory"), std::string::npos);
  EXPECT_EQ(gemv::resident_misfit(gpt_oss_shape(2, 8, 132, 736), hopper, kStaticSmemAllowance), nullptr);
}

TEST(ResidentLayout, PartialsCoverEveryUnitUpToTwoTokens) {
  // T * k slots x 180 column tiles x 8 splits (the workspace's, any plan) x T rows x 16 fp32.
  EXPECT_EQ(gemv::resident_partial_bytes(2880, 1, 4, 8), size_t{4} * 180 * 8 * 1 * 16 * 4);
  EXPECT_EQ(gemv::resident_partial_bytes(2880, 4096, 4, 8), size_t{8} * 180 * 8 * 2 * 16 * 4);
  EXPECT_EQ(gemv::resident_partial_bytes(2880, 0, 4, 8), 0u);
  EXPECT_EQ(gemv::resident_counters_needed(2880), 181);
}

TEST(Planner, ResidentDecodeStreamWhereGemm2Fits) {
  for (const char* model : {"gpt-oss-20b", "gpt-oss-120b"}) {
    const MoeConfig c = MoeConfig::preset(model);
    for (const std::string target : {"h100", "h200"}) {
      SCOPED_TRACE(std::string(model) + " on " + target);
      const Planner planner(input_for(target, c));
      const Plan t1 = planner.plan(1);
      EXPECT_TRUE(t1.resident);
      EXPECT_NE(t1.to_string().find("resident in shared memory (132 blocks)"), std::string::npos) << t1.to_string();
      EXPECT_FALSE(planner.plan(2).resident);
      EXPECT_FALSE(planner.plan(0).resident);
      // Forced off: the two-kernel plan with the cluster combine, as before.
      PlannerInput off = input_for(target, c);
      off.force = parse_plan_override("resident=0");
      const Plan t1_off = Planner(off).plan(1);
      EXPECT_FALSE(t1_off.resident);
      EXPECT_TRUE(t1_off.cluster_combine);
      // A forced split-K is the resident kernel's too.
      PlannerInput split = input_for(target, c);
      split.force = parse_plan_override("ksplit=2");
      const Plan t1_split = Planner(split).plan(1);
      EXPECT_TRUE(t1_split.resident && t1_split.ksplit1 == 2 && t1_split.ksplit2 == 2);
      // Without the fused combine there is no resident kernel.
      PlannerInput unfused = input_for(target, c);
      unfused.force = parse_plan_override("fused_combine=0");
      EXPECT_FALSE(Planner(unfused).plan(1).resident);
    }
    for (const std::string target : {"rtx5090", "rtxpro6000", "gb10"})
      EXPECT_FALSE(Planner(input_for(target, c)).plan(1).resident) << model << " on " << target << ": 99 KB";
  }
}

}  // namespace
}  // namespace mxmoe::plan
