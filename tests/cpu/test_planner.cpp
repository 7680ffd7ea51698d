// The planner (src/plan/) on the CPU, for every named target: the plan of every batch size from 0 to
// 65,536 is valid for the target (its shared memory, its features, the build's tiles), deterministic,
// and follows the measured preferences; forced values are checked; a tune table overrides the tiles.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "kernels/gemv/gemv.hpp"
#include "kernels/mma/mma_gemm.hpp"
#include "kernels/mma/mx_gemm.hpp"
#include "kernels/sm90/wgmma_fp8_gemm.hpp"
#include "kernels/sm90/wgmma_gemm.hpp"
#include "plan/tune_table.hpp"
#include "mxmoe/config.hpp"
#include "mxmoe/error.hpp"
#include "plan/planner.hpp"
#include "plan/tile_rows.hpp"
#include "planner_test_support.hpp"
#include "test_support.hpp"

namespace mxmoe::plan {
namespace {

std::vector<int64_t> all_token_counts() {
  std::vector<int64_t> out;
  for (int64_t t = 0; t <= 130; ++t) out.push_back(t);
  for (int64_t t = 131; t <= 65536; t = t * 9 / 8 + 7) out.push_back(t);
  out.push_back(1000), out.push_back(4096), out.push_back(65536);
  return out;
}

std::vector<MoeConfig> shapes() {
  return {MoeConfig::preset("gpt-oss-20b"), MoeConfig::preset("gpt-oss-120b"), test::make_config(7, 3, 96, 160)};
}

// The bytes of shared memory the plan's kernels ask for, next to the static allowance.
size_t dynamic_smem(const Plan& p, const MoeConfig& c) {
  switch (p.family) {
    case Family::Gemv: {
      const int k = std::max(c.hidden, c.intermediate);
      return p.batch_rows == 8 ? gemv::smem_bytes(k, p.stages) : 0;  // the 16-row batch: wide_batch_fits
    }
    case Family::Mma: return p.swap_ab ? mma::swap_smem_bytes(p.m_tiles) : mma::smem_bytes(p.m_tiles);
    case Family::Wgmma: return sm90::wgmma_smem_bytes(mma::block_m(p.m_tiles));
    case Family::Mx: return mma::mx_smem_bytes();
  }
  return 0;
}

void expect_valid(const Plan& p, const DeviceCaps& caps, const MoeConfig& c, int64_t t) {
  EXPECT_EQ(p.tokens, t);
  EXPECT_EQ(p.max_active, std::min<int64_t>(c.num_experts, t * c.top_k));
  const size_t allowance = p.family == Family::Gemv ? kStaticSmemAllowance : kTileStaticSmemAllowance;
  EXPECT_LE(dynamic_smem(p, c) + allowance, caps.smem_per_block) << "shared memory";
  if (p.family == Family::Wgmma) {
    EXPECT_TRUE(caps.wgmma) << "a wgmma tile on a device without wgmma";
    EXPECT_TRUE(sm90::wgmma_rows_supported(mma::block_m(p.m_tiles)));
  }
  if (p.family == Family::Mma) EXPECT_TRUE(mma::tile_supported({p.m_tiles, p.swap_ab})) << "a tile not built";
  if (p.family == Family::Gemv) {
    EXPECT_TRUE(gemv::stages_built(p.stages));
    EXPECT_TRUE(gemv::batch_rows_built(p.batch_rows));
    if (p.batch_rows == gemv::kWideBatchRows) {
      EXPECT_TRUE(gemv::wide_batch_fits(c.hidden, caps.smem_per_block, caps.gemv_static_smem));
      EXPECT_TRUE(gemv::wide_batch_fits(c.intermediate, caps.smem_per_block, caps.gemv_static_smem));
      EXPECT_EQ(p.ksplit1, 1);
      EXPECT_EQ(p.ksplit2, 1);
    }
    for (const int k : {p.ksplit1, p.ksplit2}) EXPECT_TRUE(k == 1 || k == 2 || k == 4 || k == 8) << k;
    if (p.cluster_combine) {
      EXPECT_TRUE(caps.clusters) << "a cluster launch on a device without clusters";
      EXPECT_TRUE(p.local_route && p.fused_combine);
      EXPECT_LE(t * c.top_k, gemv::kClusterSlots);
    }
    if (p.counted) EXPECT_FALSE(p.local_route || p.fused_combine);
  }
}

TEST(Planner, EveryTargetAndBatchSizeGetsAValidDeterministicPlan) {
  for (const std::string& target : target_names())
    for (const MoeConfig& c : shapes())
      for (const Backend backend : {Backend::Auto, Backend::Gemv, Backend::Mma}) {
        SCOPED_TRACE(target + ", E " + std::to_string(c.num_experts) + " H " + std::to_string(c.hidden) + ", " +
                     to_string(backend));
        const Planner planner(input_for(target, c, backend));
        const Planner again(input_for(target, c, backend));
        const DeviceCaps& caps = planner.input().caps;
        for (const int64_t t : all_token_counts()) {
          SCOPED_TRACE("T = " + std::to_string(t));
          const Plan p = planner.plan(t);
          expect_valid(p, caps, c, t);
          ASSERT_EQ(p, planner.plan(t)) << "not deterministic";
          ASSERT_EQ(p, again.plan(t)) << "another planner of the same input disagrees";
          ASSERT_FALSE(p.to_string().empty());
          if (backend == Backend::Gemv) EXPECT_EQ(p.family, Family::Gemv);
          if (backend == Backend::Mma) EXPECT_NE(p.family, Family::Gemv);
        }
      }
}

TEST(Planner, Sm12xTargetsNeverUseWgmmaOrClustersAndFitTheir99KB) {
  for (const std::string target : {"rtx5090", "rtxpro6000", "gb10"}) {
    const DeviceCaps caps = target_caps(target);
    EXPECT_EQ(caps.smem_per_block, 101376u) << target;
    EXPECT_FALSE(caps.wgmma || caps.clusters) << target;
    EXPECT_TRUE(caps.block_scaled_mma) << target;
    const Planner planner(input_for(target, MoeConfig::preset("gpt-oss-120b")));
    std::set<std::string> seen;
    for (const int64_t t : all_token_counts()) {
      const Plan p = planner.plan(t);
      EXPECT_NE(p.family, Family::Wgmma) << target << " T = " << t;
      // auto keeps W4A16 on SM12x at every T: MXFP8 activations only when asked for (docs/native-mx.md).
      EXPECT_NE(p.family, Family::Mx) << target << " T = " << t;
      EXPECT_FALSE(p.cluster_combine) << target << " T = " << t;
      EXPECT_EQ(p.batch_rows, 8) << "the 16-row batch does not fit 99 KB at K = 2880";
      seen.insert(p.to_string().substr(0, 12));
    }
    EXPECT_GE(seen.size(), 2u) << "GEMV for decode and the tensor-core tiles for larger batches";
  }
}

// Ampere and Ada (sm_80 / sm_89 code): the GEMV family with its cp.async ring, then the mma.sync tiles by
// the same rule as a Hopper without wgmma (the 16- and 32-row swap-AB tiles copy their weights by cp.async
// there); no wgmma, no clusters; the 16-row GEMV batch where 163 KB hold it (A100), not in 99 KB. fp8 is
// the MXFP8 path on SM89 (auto_backend_for: mx-emulated, whose FP8 mma.sync is native there) and refused
// on SM80, which has no FP8 mma.sync.
TEST(Planner, Sm8xTargetsPlanTheCpAsyncFamiliesAndFp8OnlyOnSm89) {
  const MoeConfig c = MoeConfig::preset("gpt-oss-120b");
  for (const std::string target : {"a100", "rtx4090", "l40s"}) {
    SCOPED_TRACE(target);
    const DeviceCaps caps = target_caps(target);
    EXPECT_EQ(kernels::arch_of(caps.cc_major, caps.cc_minor), kernels::kArchSm8x);
    EXPECT_FALSE(caps.wgmma || caps.clusters || caps.bulk_copies || caps.block_scaled_mma);
    const bool sm89 = caps.cc_minor == 9;
    EXPECT_EQ(caps.fp8_mma_sync, sm89);
    const Fits f = fits_for_caps(caps);
    EXPECT_TRUE(f.mma && f.mx);
    EXPECT_FALSE(f.wgmma || f.wgmma_fp8);
    const Planner planner(input_for(target, c));
    std::set<Family> families;
    for (const int64_t t : all_token_counts()) {
      const Plan p = planner.plan(t);
      EXPECT_TRUE(p.family == Family::Gemv || p.family == Family::Mma) << "T = " << t;
      EXPECT_FALSE(p.cluster_combine) << "T = " << t;
      if (p.family == Family::Gemv && p.batch_rows != 8)
        EXPECT_TRUE(gemv::wide_batch_fits(c.hidden, caps.smem_per_block, kStaticSmemAllowance)) << "T = " << t;
      families.insert(p.family);
    }
    EXPECT_EQ(families.size(), 2u) << "GEMV for decode and the mma.sync tiles for larger batches";
    EXPECT_EQ(planner.plan(1024).swap_ab, true) << "the 32-row swap-AB tile at 32 rows per expert";
    // fp8: the MXFP8 path where FP8 mma.sync exists, else the planner says what fp8 needs.
    EXPECT_EQ(auto_backend_for(Precision::Fp8, caps), sm89 ? Backend::MxEmulated : Backend::Auto);
    EXPECT_EQ(auto_backend_for(Precision::Bf16, caps), Backend::Auto);
    PlannerInput fp8 = input_for(target, c, auto_backend_for(Precision::Fp8, caps));
    fp8.precision = Precision::Fp8;
    if (sm89) {
      EXPECT_EQ(Planner(fp8).plan(64).family, Family::Mx);
    } else {
      test::expect_error_naming([&] { Planner p(fp8); }, "precision: 'fp8' on a100");
      PlannerInput mx = input_for(target, c, Backend::MxEmulated);
      test::expect_error_naming([&] { Planner p(mx); }, "compute capability 8.9 or newer");
    }
  }
  EXPECT_EQ(auto_backend_for(Precision::Fp8, target_caps("h100")), Backend::Auto);
  EXPECT_EQ(auto_backend_for(Precision::Fp8, target_caps("rtx5090")), Backend::Mx);
  // Resident GEMV blocks per SM follow the shared memory (3 from 164 KB, 2 in 100 KB): 6 slots of GEMM1's
  // 360 tiles fill 90% of 2 x 132 slots unsplit (270 blocks), not of 3 x 132.
  DeviceCaps small = target_caps("h100");
  small.smem_per_sm = 100 * 1024;
  EXPECT_EQ(choose_gemv_ksplit(target_caps("h100"), 360, 23, 6), 2);
  EXPECT_EQ(choose_gemv_ksplit(small, 360, 23, 6), 1);
}

// The defaults the runner had before the planner moved out of it (bit-identical plans on Hopper).
TEST(Planner, HopperDefaultsAreTheMeasuredRule) {
  for (const std::string target : {"h100", "h200"}) {
    SCOPED_TRACE(target);
    const Planner p120(input_for(target, MoeConfig::preset("gpt-oss-120b")));
    const Plan t1 = p120.plan(1);
    EXPECT_EQ(t1.family, Family::Gemv);
    EXPECT_TRUE(t1.local_route && t1.fused_combine && t1.cluster_combine);
    const Plan t4 = p120.plan(4);
    EXPECT_TRUE(t4.counted && !t4.local_route && !t4.fused_combine && !t4.cluster_combine);
    EXPECT_FALSE(p120.plan(16).counted);
    const Plan t64 = p120.plan(64);  // 2 rows per expert
    EXPECT_EQ(t64.family, Family::Mma);
    EXPECT_TRUE(t64.swap_ab && t64.m_tiles == 1);
    if (!sm90::wgmma_in_build()) GTEST_SKIP() << "this build has no wgmma tiles";
    EXPECT_EQ(p120.plan(448).family, Family::Wgmma);  // 14 rows
    EXPECT_EQ(p120.plan(448).m_tiles, 2);
    EXPECT_EQ(p120.plan(1024).m_tiles, 4);  // 32 rows
    EXPECT_EQ(p120.plan(4096).m_tiles, 8);  // 128 rows
    PlannerInput off = input_for(target, MoeConfig::preset("gpt-oss-120b"));
    off.force.wgmma = false;
    const Plan swap = Planner(off).plan(4096);
    EXPECT_EQ(swap.family, Family::Mma);
    EXPECT_TRUE(swap.swap_ab && swap.m_tiles == 4);
    EXPECT_EQ(Planner(input_for(target, MoeConfig::preset("gpt-oss-20b"), Backend::Gemv)).plan(64).batch_rows, 16);
  }
}

// The GEMV split-K for gpt-oss's shapes on a 132-SM Hopper: the splits that measured best on an H200
// (docs/perf/gemv.md, "Split-K"). GEMM1 has 360 16-row tiles (2 x 2880 rows), GEMM2 180, K = 2880 is 23
// chunks; max_active = min(E, T * 4) at T = 1 .. 4.
TEST(Planner, GemvSplitKOfGptOssOnA132SmHopper) {
  struct Case {
    int tiles, max_active, want;
  };
  const Case cases[] = {{360, 4, 2},  {180, 4, 4},  {360, 8, 1},  {180, 8, 2},
                        {360, 12, 1}, {180, 12, 2}, {360, 16, 1}, {180, 16, 1}};
  for (const std::string target : {"h100", "h200"})
    for (const Case& c : cases)
      EXPECT_EQ(choose_gemv_ksplit(target_caps(target), c.tiles, 23, c.max_active), c.want)
          << target << ", tiles " << c.tiles << ", max_active " << c.max_active;
  // A 48-SM GB10 (2 resident blocks per SM) fills its SMs with fewer splits.
  EXPECT_LE(choose_gemv_ksplit(target_caps("gb10"), 180, 23, 4), choose_gemv_ksplit(target_caps("h100"), 180, 23, 4));
}

TEST(Planner, ForcedValuesAreCheckedAgainstTheTarget) {
  const MoeConfig c = MoeConfig::preset("gpt-oss-120b");
  PlannerInput in = input_for("gb10", c);
  in.force = parse_plan_override("mma=wgmma64", "MXMOE_PLAN");
  test::expect_error_naming([&] { Planner{in}; }, "mma=wgmma64");
  in.force = parse_plan_override("batch=16", "MXMOE_PLAN");
  test::expect_error_naming([&] { Planner{in}; }, "batch=16");
  in = input_for("h100", c);
  in.force = parse_plan_override("mma=wgmma64,wgmma=0", "MXMOE_PLAN");
  if (sm90::wgmma_in_build()) test::expect_error_naming([&] { Planner{in}; }, "contradicts wgmma=0");
  in = input_for("h100", c, Backend::Mx);
  test::expect_error_naming([&] { Planner{in}; }, "SM120/SM121");
  in = input_for("gb10", c, Backend::Mx);
  EXPECT_EQ(Planner(in).plan(5).family, Family::Mx);
  EXPECT_TRUE(Planner(in).plan(5).mx_native);
}

TEST(Planner, ForcedTilesAndGemvKnobsAreWhatThePlanSays) {
  const MoeConfig c = MoeConfig::preset("gpt-oss-20b");
  PlannerInput in = input_for("h200", c, Backend::Mma);
  in.force = parse_plan_override("mma=swap32", "test");
  const Plan p = Planner(in).plan(3);
  EXPECT_EQ(p.family, Family::Mma);
  EXPECT_TRUE(p.swap_ab && p.m_tiles == 2);
  in = input_for("h200", c, Backend::Gemv);
  in.force = parse_plan_override("ksplit=4,counted=1,local_route=0,fused_combine=0,stages=3", "test");
  if (!gemv::stages_built(3)) GTEST_SKIP() << "the minimal profile has one ring depth";
  const Plan g = Planner(in).plan(32);
  EXPECT_EQ(g.ksplit1, 4);
  EXPECT_EQ(g.ksplit2, 4);
  EXPECT_EQ(g.stages, 3);
  EXPECT_TRUE(g.counted && !g.local_route && !g.fused_combine);
  EXPECT_EQ(g.batch_rows, 8) << "the 16-row batch runs the default ring only";
}

TEST(Planner, AMatchingTuneTableOverridesThePreferencesAndAnotherIsIgnored) {
  const MoeConfig c = MoeConfig::preset("gpt-oss-120b");
  PlannerInput in = input_for("h100", c);
  TuneTable table;
  table.device = in.caps.name;
  table.compute_capability = "9.0";
  table.experts = c.num_experts, table.top_k = c.top_k, table.hidden = c.hidden, table.intermediate = c.intermediate;
  TunePlan gemv;
  gemv.max_rows_per_expert = 1.5;
  TunePlan tile;
  tile.mma = true, tile.m_tiles = 2;  // the 32-row plain tile from 1.5 rows per expert on
  table.plans = {gemv, tile};
  in.tune = table;
  const Planner tuned(in);
  EXPECT_EQ(tuned.plan(1).family, Family::Gemv);
  const Plan p = tuned.plan(64);
  EXPECT_EQ(p.family, Family::Mma);
  EXPECT_TRUE(!p.swap_ab && p.m_tiles == 2 && p.from_tune_table);
  EXPECT_NE(p.to_string().find("mma bf16 32x256x128 tiles, both gemms (tune table)"), std::string::npos) << p.to_string();
  table.device = "NVIDIA Some Other GPU";
  in.tune = table;
  const Planner ignored(in);
  EXPECT_FALSE(ignored.plan(64).from_tune_table);
  EXPECT_EQ(ignored.plan(64), Planner(input_for("h100", c)).plan(64));
}

TEST(PlanOverride, StringFormRoundTripsAndErrorsListTheValidValues) {
  const PlanOverride o = parse_plan_override(" mma=wgmma128 , ksplit=2,batch=16,stages=3,counted=0,local_route=4,"
                                             "fused_combine=8,cluster_combine=0,mx_expand=1,wgmma=1");
  ASSERT_TRUE(o.mma_tile.has_value());
  EXPECT_EQ(o.mma_tile->rows, 128);
  EXPECT_EQ(o.mma_tile->form, MmaForm::Wgmma);
  EXPECT_EQ(*o.gemv_ksplit, 2);
  EXPECT_EQ(parse_plan_override(to_string(o)), o);
  EXPECT_TRUE(parse_plan_override("").empty());
  test::expect_error_naming([] { parse_plan_override("ksplit=3", "MXMOE_PLAN"); }, "ksplit takes one of 1, 2, 4, 8");
  test::expect_error_naming([] { parse_plan_override("mma=swap8", "MXMOE_PLAN"); }, "mma takes one of 16, 32");
  test::expect_error_naming([] { parse_plan_override("tile=16", "MXMOE_PLAN"); }, "unknown key 'tile'");
  test::expect_error_naming([] { parse_plan_override("ksplit", "MXMOE_PLAN"); }, "MXMOE_PLAN: 'ksplit' is not key=value");
  test::expect_error_naming([] { parse_plan_override("fused_combine=9", "MXMOE_PLAN"); }, "fused_combine takes 0 to 8");
}

TEST(Targets, AreDataAndAnUnknownNameListsThem) {
  EXPECT_EQ(target_names(),
            (std::vector<std::string>{"h100", "h200", "rtx5090", "rtxpro6000", "gb10", "a100", "rtx4090", "l40s"}));
  EXPECT_EQ(target_caps("gb10").sm_count, 48);
  EXPECT_EQ(target_caps("rtx5090").sm_count, 170);
  EXPECT_EQ(target_caps("h200").sm_count, 132);
  EXPECT_TRUE(target_caps("h100").wgmma);
  EXPECT_EQ(target_caps("a100").sm_count, 108);
  test::expect_error_naming([] { target_caps("b200"); },
                            "valid targets are: h100, h200, rtx5090, rtxpro6000, gb10, a100, rtx4090, l40s");
}

// An expert-parallel rank (E / W experts, the other ranks' pairs dropped) is planned for its share of the
// pairs: the same rows per expert, so the same family and tile, as one GPU with the whole layer at the same
// T. Planned as if all T * k pairs were local, it took bigger tiles (the records of 2026-11-28).
TEST(Planner, AnExpertParallelRankPlansForItsShareOfThePairs) {
  const MoeConfig full = MoeConfig::preset("gpt-oss-120b");
  for (const std::string target : {"h100", "h200", "rtx5090", "gb10"}) {
    const Planner one_gpu(input_for(target, full));
    for (const int world : {2, 4, 8}) {
      MoeConfig local = full;
      local.num_experts = full.num_experts / world;
      PlannerInput rank = input_for(target, local);
      const Planner naive(rank);
      rank.routed_experts = full.num_experts;
      const Planner shared(rank);
      bool naive_differs = false;
      for (const int64_t t : {1, 2, 4, 8, 16, 64, 128, 256, 512, 768, 1024, 2048, 4096}) {
        const Plan want = one_gpu.plan(t), got = shared.plan(t), old = naive.plan(t);
        EXPECT_EQ(got.family, want.family) << target << " world " << world << " T = " << t;
        EXPECT_EQ(got.max_active, std::min<int64_t>(local.num_experts, t * full.top_k)) << "grids cover every pair";
        if (want.family == Family::Gemv) {
          EXPECT_EQ(got.batch_rows, want.batch_rows) << target << " world " << world << " T = " << t;
        } else {
          EXPECT_EQ(got.m_tiles, want.m_tiles) << target << " world " << world << " T = " << t;
          EXPECT_EQ(got.swap_ab, want.swap_ab) << target << " world " << world << " T = " << t;
        }
        naive_differs |= old.family != want.family || old.m_tiles != want.m_tiles || old.swap_ab != want.swap_ab;
      }
      EXPECT_TRUE(naive_differs) << target << " world " << world << ": the share should change some plan";
    }
  }
  PlannerInput bad = input_for("h100", full);
  bad.routed_experts = full.num_experts - 1;
  test::expect_error_naming([&] { Planner p(bad); }, "routed_experts");
}

// Precision::Fp8 under auto plans the W4A8 wgmma tiles at every T on the Hopper targets (32 rows at
// decode, 64 and 128 as the bf16 wgmma tiles grow, 192 from 124 rows per expert); an SM120/SM121 target
// has no W4A8 tiles (its fp8 is the mx backend, which resolve_backend picks there); the W4A16 backends
// refuse it by name.
TEST(Planner, Fp8PlansTheW4a8TilesOnHopperAndIsRefusedWhereTheyCannotRun) {
  const MoeConfig c = MoeConfig::preset("gpt-oss-120b");
  for (const std::string target : {"h100", "h200"}) {
    PlannerInput in = input_for(target, c);
    in.precision = Precision::Fp8;
    const Planner fp8(in);
    for (const int64_t t : {1, 4, 64, 256, 1024, 4096}) {
      const Plan p = fp8.plan(t);
      EXPECT_EQ(p.family, Family::WgmmaFp8) << target << " T = " << t;
      const std::string weight_rows = t < 3968 ? "256x" : "192x";  // the 192-row tile has 12 warps
      EXPECT_NE(p.to_string().find("wgmma fp8 (W4A8) " + weight_rows), std::string::npos) << p.to_string();
    }
    EXPECT_EQ(fp8.plan(1).m_tiles, 2);
    EXPECT_EQ(fp8.plan(1024).m_tiles, 4);  // 32 rows per expert
    EXPECT_EQ(fp8.plan(3967).m_tiles, 8);  // 123.97 rows per expert
    EXPECT_EQ(fp8.plan(3968).m_tiles, 12);  // 124
    EXPECT_EQ(fp8.plan(4096).m_tiles, 12);
    // Where bf16 runs a wgmma tile, fp8 runs the W4A8 tile of the same height (the same table rows) below
    // 124 rows per expert.
    const Planner bf16_auto(input_for(target, c));
    for (const int64_t t : {448, 767, 768, 1919, 1920, 3967}) {
      ASSERT_EQ(bf16_auto.plan(t).family, Family::Wgmma) << "T = " << t;
      EXPECT_EQ(fp8.plan(t).m_tiles, bf16_auto.plan(t).m_tiles) << target << " T = " << t;
    }
    // gpt-oss-20b (32 experts): 124 rows per expert at T = 992.
    PlannerInput in20 = input_for(target, MoeConfig::preset("gpt-oss-20b"));
    in20.precision = Precision::Fp8;
    EXPECT_EQ(Planner(in20).plan(991).m_tiles, 8);
    EXPECT_EQ(Planner(in20).plan(992).m_tiles, 12);
    EXPECT_EQ(Planner(in20).plan(4096).m_tiles, 12);
    // The GPU layer test's small shape (test_gpu_fp8_layer.cpp) runs the 128-row tile at T = 700 (88 rows
    // per expert) and the 192-row one at T = 1000 and 4096 (125 and 512).
    PlannerInput small = input_for(target, test::make_config(32, 4, 512, 512));
    small.precision = Precision::Fp8;
    EXPECT_EQ(Planner(small).plan(700).m_tiles, 8);
    EXPECT_EQ(Planner(small).plan(1000).m_tiles, 12);
    EXPECT_EQ(Planner(small).plan(4096).m_tiles, 12);
    EXPECT_EQ(Planner(input_for(target, c)).plan(1).family, Family::Gemv) << "bf16 stays the default";
    // Forced through mma=: an fp8 tile at fp8 only, a W4A16 tile at bf16 only.
    PlannerInput forced = in;
    forced.force = parse_plan_override("mma=fp8wgmma128", "MXMOE_PLAN");
    EXPECT_EQ(Planner(forced).plan(1).m_tiles, 8);
    forced.force = parse_plan_override("mma=wgmma64", "MXMOE_PLAN");
    test::expect_error_naming([&] { Planner p(forced); }, "mma=wgmma64");
    PlannerInput bf16 = input_for(target, c);
    bf16.force = parse_plan_override("mma=fp8wgmma64", "MXMOE_PLAN");
    test::expect_error_naming([&] { Planner p(bf16); }, "mma=fp8wgmma64");
    for (const Backend b : {Backend::Gemv, Backend::Mma}) {
      PlannerInput w4a16 = input_for(target, c, b);
      w4a16.precision = Precision::Fp8;
      test::expect_error_naming([&] { Planner p(w4a16); }, "precision");
    }
  }
  for (const std::string target : {"rtx5090", "rtxpro6000", "gb10"}) {
    PlannerInput in = input_for(target, c);
    in.precision = Precision::Fp8;
    test::expect_error_naming([&] { Planner p(in); }, "precision");
    in.backend = Backend::Mx;  // the MXFP8 path
    EXPECT_EQ(Planner(in).plan(1024).family, Family::Mx) << target;
  }
}

// The W4A8 tiles' split-K: at decode sizes each GEMM's K is shared by as many blocks of a cluster as
// still run in one wave on the target (gpt-oss-120b at T = 1 on 132 SMs, 2 blocks each: GEMM1's 92
// blocks 2 ways, GEMM2's 48 blocks 4 ways: powers of two), never past kMaxSplits or 2 chunks a split;
// none once a GEMM's blocks fill the SMs; only in the 32-row tile (the one that runs at decode sizes);
// forced by ksplit=.
TEST(Planner, Fp8SplitsKWhereTheBlocksLeaveSlotsEmpty) {
  for (const std::string model : {"gpt-oss-20b", "gpt-oss-120b"}) {
    const MoeConfig c = MoeConfig::preset(model);
    for (const std::string target : {"h100", "h200"}) {
      PlannerInput in = input_for(target, c);
      in.precision = Precision::Fp8;
      const Planner fp8(in);
      const Plan one = fp8.plan(1);
      EXPECT_EQ(one.ksplit1, 2) << model << " " << target;
      EXPECT_EQ(one.ksplit2, 4) << model << " " << target;
      EXPECT_NE(one.to_string().find("split-K 2 / 4 (clusters)"), std::string::npos) << one.to_string();
      for (const int64_t t : {1, 2, 3, 4, 8, 16, 64, 256, 1024, 4096}) {
        const Plan p = fp8.plan(t);
        const int rows = 16 * p.m_tiles;
        const int64_t slots = int64_t{target_caps(target).sm_count} * sm90::wgmma_fp8_blocks_per_sm(rows);
        const int64_t m_blocks = t * c.top_k / rows + p.max_active;
        const int weight_rows = kernels::kTileTable[row_of(p)].weight_rows;  // 256, or 192 in the 192-row tile
        const int64_t blocks1 = m_blocks * ((2 * c.intermediate + weight_rows - 1) / weight_rows),
                      blocks2 = m_blocks * ((c.hidden + weight_rows - 1) / weight_rows);
        for (const auto& [split, blocks] : {std::pair{p.ksplit1, blocks1}, std::pair{p.ksplit2, blocks2}}) {
          EXPECT_GE(split, 1);
          EXPECT_LE(split, sm90::kMaxSplits);
          EXPECT_LE(split * 2, 23) << "at least 2 chunks a split";
          EXPECT_EQ(split & (split - 1), 0) << "a power of two";
          if (split > 1) EXPECT_LE(split * blocks, slots) << model << " T = " << t << ": one wave";
          // The largest power of two in one wave, unless the caps (kMaxSplits, 2 chunks a split) stop it.
          if (split > 1 && 2 * split <= std::min(sm90::kMaxSplits, 23 / 2))
            EXPECT_GT(split * 2 * blocks, slots) << model << " T = " << t << ": the largest";
          EXPECT_EQ(split > 1, rows == sm90::kSplitRows && blocks * 2 <= slots)
              << model << " T = " << t << ": split where a second block fits";
        }
      }
      EXPECT_EQ(fp8.plan(16).ksplit1, 1);
      EXPECT_EQ(fp8.plan(4096).ksplit2, 1);
      PlannerInput forced = in;
      forced.force = parse_plan_override("ksplit=8", "MXMOE_PLAN");
      EXPECT_EQ(Planner(forced).plan(16).ksplit1, 8);
      EXPECT_EQ(Planner(forced).plan(1).ksplit2, 8);
      EXPECT_EQ(Planner(forced).plan(4096).ksplit1, 1) << "the 192-row tile has no split-K";
    }
  }
  // The rule itself, on the H200's 132 SMs.
  EXPECT_EQ(choose_fp8_splits(target_caps("h200"), 32, 92, 23), 2);
  EXPECT_EQ(choose_fp8_splits(target_caps("h200"), 32, 48, 23), 4);   // 5 fit: powers of two
  EXPECT_EQ(choose_fp8_splits(target_caps("h200"), 32, 40, 23), 4);   // 6 fit
  EXPECT_EQ(choose_fp8_splits(target_caps("h200"), 32, 10, 23), 8);   // at most kMaxSplits
  EXPECT_EQ(choose_fp8_splits(target_caps("h200"), 32, 10, 5), 2);    // at least 2 chunks a split
  EXPECT_EQ(choose_fp8_splits(target_caps("h200"), 128, 92, 23), 1);  // one block per SM: 132 slots
  EXPECT_EQ(choose_fp8_splits(target_caps("h200"), 32, 0, 23), 1);
}

}  // namespace
}  // namespace mxmoe::plan
