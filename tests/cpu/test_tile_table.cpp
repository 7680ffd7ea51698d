// The tile table (kernels/tile_table.hpp) and its readers: every row's name and forcing override parse
// back through MXMOE_PLAN to that row, as the planner runs it; names are unique; every SM120/SM121 row
// fits 99 KB; the minimal profile keeps a tile of every family the planner picks there; the kernels' own
// figures are the table's; and `bench --tune`'s candidates are exactly the rows a tune table can select.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kernels/gemv/gemv.hpp"
#include "kernels/mma/mma_gemm.hpp"
#include "kernels/mma/mx_gemm.hpp"
#include "kernels/sm90/wgmma_fp8_gemm.hpp"
#include "kernels/sm90/wgmma_gemm.hpp"
#include "kernels/tile_table.hpp"
#include "mxmoe/error.hpp"
#include "mxmoe/plan_override.hpp"
#include "plan/planner.hpp"
#include "plan/tile_rows.hpp"
#include "planner_test_support.hpp"
#include "test_support.hpp"

namespace mxmoe::plan {
namespace {

using kernels::kTileTable;
using kernels::TileFamily;
using kernels::TileRow;

// A target where the row runs: Hopper, else SM12x.
std::string target_for(const TileRow& r) { return (r.archs & kernels::kArchSm90a) != 0 ? "h100" : "rtx5090"; }

std::vector<MoeConfig> shapes() {
  return {MoeConfig::preset("gpt-oss-20b"), MoeConfig::preset("gpt-oss-120b"), test::make_config(7, 3, 96, 160)};
}

bool is_tensor_core(TileFamily f) { return f == TileFamily::Mma || f == TileFamily::Swap || f == TileFamily::Wgmma; }

// Whether the planner can run the row here: built, and for wgmma with sm_90a code in the library.
bool runnable(const TileRow& r) {
  const bool wgmma = r.family == TileFamily::Wgmma || r.family == TileFamily::WgmmaFp8;
  return kernels::row_built(r) && (!wgmma || sm90::wgmma_in_build());
}

TEST(TileTable, NamesAreUniqueAndEachRowsOverrideParsesBackToIt) {
  std::set<std::string> names;
  for (const TileRow& r : kTileTable) {
    SCOPED_TRACE(std::string(r.name));
    EXPECT_TRUE(names.insert(std::string(r.name)).second) << "a second row of this name";
    const TileForce force = force_of(r);
    const std::string text = to_string(force.plan);
    EXPECT_EQ(parse_plan_override(text, "MXMOE_PLAN"), force.plan) << text;
    if (is_tensor_core(r.family)) {
      EXPECT_EQ(text, "mma=" + std::string(r.name));
      const PlanOverride o = parse_plan_override("mma=" + std::string(r.name), "MXMOE_PLAN");
      ASSERT_TRUE(o.mma_tile.has_value());
      EXPECT_EQ(row_of(*o.mma_tile), &r - kTileTable);
      EXPECT_EQ(o.mma_tile->rows, r.rows);
      EXPECT_EQ(force.backend, Backend::Mma);
      EXPECT_EQ(force.precision, Precision::Bf16);
    } else if (r.family == TileFamily::WgmmaFp8) {  // auto at precision fp8, mma=NAME
      EXPECT_EQ(text, "mma=" + std::string(r.name));
      EXPECT_EQ(force.backend, Backend::Auto);
      EXPECT_EQ(force.precision, Precision::Fp8);
    } else if (r.family == TileFamily::Gemv) {
      EXPECT_EQ(force.plan.gemv_batch_rows.value_or(0), r.rows);
      EXPECT_EQ(force.plan.gemv_stages.value_or(gemv::kDefaultStages), r.stages);
      EXPECT_EQ(force.backend, Backend::Gemv);
    } else {
      EXPECT_TRUE(force.plan.empty()) << "the MX tile is the backend's";
    }
  }
  EXPECT_EQ(names.size(), kernels::kTileCount);
  // A name that is not a row's is refused, and the error lists the rows' names.
  std::mt19937_64 rng(test::fresh_seed());
  for (int i = 0; i < 20; ++i) {
    const TileRow& r = kTileTable[rng() % kernels::kTileCount];
    const std::string bad = std::string(r.name) + std::to_string(1 + rng() % 7);
    if (names.count(bad) != 0) continue;
    test::expect_error_naming([&] { parse_plan_override("mma=" + bad, "MXMOE_PLAN"); }, "swap128");
  }
}

// Each row forced through MXMOE_PLAN's string form (or, for the MX tile, its backend) is the row the
// planner's plan runs, at any T; a row this build lacks is refused with the key's name.
TEST(TileTable, EveryForcedRowIsTheRowThePlanRuns) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < kernels::kTileCount; ++i) {
    const TileRow& r = kTileTable[i];
    SCOPED_TRACE(std::string(r.name));
    const TileForce force = force_of(r);
    for (const MoeConfig& c : shapes()) {
      PlannerInput in = input_for(target_for(r), c, force.backend);
      in.precision = force.precision;
      in.force = parse_plan_override(to_string(force.plan), "MXMOE_PLAN");
      if (!runnable(r)) {
        EXPECT_THROW(Planner{in}, Error) << "a row this build lacks";
        continue;
      }
      const Planner planner(in);
      for (int k = 0; k < 8; ++k) {
        const int64_t t = 1 + static_cast<int64_t>(rng() % 65536);
        const Plan p = planner.plan(t);
        EXPECT_EQ(row_of(p), static_cast<int>(i)) << "T = " << t << ": " << p.to_string();
      }
    }
  }
}

TEST(TileTable, Sm12xRowsFitTheir99KBAndTheKernelsAgree) {
  for (const std::string target : {"rtx5090", "rtxpro6000", "gb10"}) {
    const DeviceCaps caps = target_caps(target);
    EXPECT_EQ(caps.smem_per_block, kernels::kSm12xSmemPerBlock) << target;
    EXPECT_EQ(kernels::arch_of(caps.cc_major, caps.cc_minor), kernels::kArchSm12x) << target;
    const Fits f = fits_for_caps(caps);
    EXPECT_TRUE(f.mma && f.mx) << target;
    EXPECT_FALSE(f.wgmma) << target;
  }
  EXPECT_EQ(kernels::arch_of(9, 0), kernels::kArchSm90a);
  EXPECT_EQ(kernels::arch_of(8, 9), kernels::kArchSm8x);
  EXPECT_EQ(kernels::arch_of(8, 0), kernels::kArchSm8x);
  EXPECT_EQ(kernels::arch_of(7, 5), 0);
  EXPECT_EQ(kernels::arch_of(10, 0), 0);
  int sm12x_rows = 0;
  for (const TileRow& r : kTileTable) {
    SCOPED_TRACE(std::string(r.name));
    if (r.family == TileFamily::Gemv) {
      EXPECT_EQ(r.smem_bytes, kernels::kSmemOfK) << "the GEMV rows' bytes depend on K (gemv::smem_bytes)";
      continue;
    }
    EXPECT_GT(r.smem_bytes, 0);
    if ((r.archs & kernels::kArchSm12x) != 0) {
      ++sm12x_rows;
      EXPECT_LE(r.smem_bytes + kTileStaticSmemAllowance, kernels::kSm12xSmemPerBlock);
    }
    // The kernels' host-side figures are the row's (the translation units static-assert their shapes).
    const int m = r.rows / 16;
    switch (r.family) {
      case TileFamily::Mma: EXPECT_EQ(mma::smem_bytes(m), static_cast<size_t>(r.smem_bytes)); break;
      case TileFamily::Swap: EXPECT_EQ(mma::swap_smem_bytes(m), static_cast<size_t>(r.smem_bytes)); break;
      case TileFamily::Wgmma: EXPECT_EQ(sm90::wgmma_smem_bytes(r.rows), static_cast<size_t>(r.smem_bytes)); break;
      case TileFamily::Mx: EXPECT_EQ(mma::mx_smem_bytes(), static_cast<size_t>(r.smem_bytes)); break;
      case TileFamily::WgmmaFp8:
        EXPECT_EQ(sm90::wgmma_fp8_smem_bytes(r.rows), static_cast<size_t>(r.smem_bytes));
        break;
      case TileFamily::Gemv: break;
    }
  }
  EXPECT_GE(sm12x_rows, 8);
  // The check can fail: a budget a byte short of the widest SM12x tile's need refuses the swap-AB rows.
  int widest = 0;
  for (const TileRow& r : kTileTable)
    if (r.family == TileFamily::Swap && kernels::row_built(r)) widest = std::max(widest, r.smem_bytes);
  if (widest > 0) {
    const size_t need = widest + kTileStaticSmemAllowance;
    EXPECT_TRUE(kernels::rows_fit(TileFamily::Swap, kernels::kArchSm12x, need, kTileStaticSmemAllowance));
    EXPECT_FALSE(kernels::rows_fit(TileFamily::Swap, kernels::kArchSm12x, need - 1, kTileStaticSmemAllowance));
  }
  // The GEMV rows at gpt-oss's K on SM12x: the default ring fits, the 16-row batch does not (its row says so).
  EXPECT_TRUE(gemv::stages_fit(2880, gemv::kDefaultStages, kernels::kSm12xSmemPerBlock, kStaticSmemAllowance));
  EXPECT_FALSE(gemv::wide_batch_fits(2880, kernels::kSm12xSmemPerBlock, kStaticSmemAllowance));
}

// The build helpers read the table: a row is built exactly where the kernels' own checks say so, and
// the minimal profile keeps a tile of every family the planner can pick in it (GEMV at the default
// ring, the 64-row register-decode tile the planner falls back to, the MX tile).
TEST(TileTable, BuiltRowsAndTheMinimalProfile) {
  for (const TileRow& r : kTileTable) {
    SCOPED_TRACE(std::string(r.name));
    const bool built = kernels::row_built(r);
    EXPECT_EQ(built, r.minimal || !kernels::kMinimalProfile);
    switch (r.family) {
      case TileFamily::Gemv:
        EXPECT_EQ(built, gemv::batch_rows_built(r.rows) && gemv::stages_built(r.stages));
        break;
      case TileFamily::Mma: EXPECT_EQ(built, mma::m_tiles_supported(r.rows / 16)); break;
      case TileFamily::Swap: EXPECT_EQ(built, mma::swap_supported(r.rows / 16)); break;
      case TileFamily::Wgmma: EXPECT_EQ(built, sm90::wgmma_rows_supported(r.rows)); break;
      case TileFamily::Mx: EXPECT_TRUE(built) << "every profile has the MX tile"; break;
      case TileFamily::WgmmaFp8: EXPECT_EQ(built, sm90::wgmma_fp8_rows_supported(r.rows)); break;
    }
  }
  const int gemv_minimal = kernels::find_row(TileFamily::Gemv, 8, gemv::kDefaultStages);
  ASSERT_GE(gemv_minimal, 0);
  EXPECT_TRUE(kTileTable[gemv_minimal].minimal);
  ASSERT_GE(kernels::find_row(TileFamily::Mma, 64), 0);
  EXPECT_TRUE(kTileTable[kernels::find_row(TileFamily::Mma, 64)].minimal) << "the planner's fallback tile";
  for (const TileFamily f :
       {TileFamily::Gemv, TileFamily::Mma, TileFamily::Swap, TileFamily::Wgmma, TileFamily::Mx, TileFamily::WgmmaFp8}) {
    int minimal = 0;
    for (const TileRow& r : kTileTable) minimal += r.family == f && r.minimal;
    EXPECT_LE(minimal, 1) << "one tile per family in the minimal profile";
  }
  // Whatever the profile, every plan of every target and backend runs a built row.
  std::mt19937_64 rng(test::fresh_seed());
  for (const std::string& target : target_names())
    for (const Backend b : {Backend::Auto, Backend::Gemv, Backend::Mma}) {
      const Planner planner(input_for(target, MoeConfig::preset("gpt-oss-120b"), b));
      for (int k = 0; k < 40; ++k) {
        const int64_t t = static_cast<int64_t>(rng() % 70000);
        const int row = row_of(planner.plan(t));
        ASSERT_GE(row, 0) << target << " T = " << t;
        EXPECT_TRUE(runnable(kTileTable[row])) << target << " T = " << t << ": " << kTileTable[row].name;
        EXPECT_NE(kTileTable[row].archs & kernels::arch_of(planner.input().caps.cc_major,
                                                           planner.input().caps.cc_minor), 0);
      }
    }
}

// Compile-time iteration and run-time dispatch over a family's built rows.
TEST(TileTable, ForEachRowAndWithRowVisitTheFamilysBuiltRows) {
  std::vector<size_t> visited;
  kernels::for_each_row<TileFamily::Swap>([&](auto i) {
    static_assert(kernels::kRowOf<decltype(i)>.family == TileFamily::Swap);
    visited.push_back(decltype(i)::value);
  });
  std::vector<size_t> want;
  for (size_t i = 0; i < kernels::kTileCount; ++i)
    if (kTileTable[i].family == TileFamily::Swap && kernels::row_built(kTileTable[i])) want.push_back(i);
  EXPECT_EQ(visited, want);
  std::mt19937_64 rng(test::fresh_seed());
  for (int k = 0; k < 200; ++k) {
    const int rows = static_cast<int>(rng() % 160);
    size_t got = kernels::kTileCount;
    const bool found = kernels::with_row<TileFamily::Wgmma>(rows, [&](auto i) { got = decltype(i)::value; });
    EXPECT_EQ(found, sm90::wgmma_rows_supported(rows)) << rows;
    if (found) {
      EXPECT_EQ(kTileTable[got].rows, rows);
    }
  }
}

// bench --tune's candidates are exactly the rows that some tune plan makes the planner run from the tune
// table: each candidate's own plan selects it (through the table's JSON), and no other plan a tune table
// can hold selects a row outside them (the 3-stage GEMV ring and the MX tile are not tune choices).
TEST(TileTable, TuneCandidatesAreTheRowsATuneTableSelects) {
  const MoeConfig c = MoeConfig::preset("gpt-oss-120b");
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  // The row the planner runs on `target` with a tune table of one plan, or -1 if the table is refused
  // or the tile did not come from it.
  auto selected = [&](const std::string& target, const TunePlan& plan) {
    PlannerInput in = input_for(target, c, Backend::Auto);
    TuneTable table;
    table.device = in.caps.name;
    table.compute_capability = std::to_string(in.caps.cc_major) + "." + std::to_string(in.caps.cc_minor);
    table.experts = c.num_experts, table.top_k = c.top_k, table.hidden = c.hidden, table.intermediate = c.intermediate;
    table.plans = {plan};
    try {
      in.tune = parse_tune_table(tune_table_to_json(table), "tune");
    } catch (const Error&) {
      return -1;
    }
    const Plan p = Planner(in).plan(256 + static_cast<int64_t>(rng() % 8000));  // 8 or more rows per expert
    return p.family == Family::Gemv || p.from_tune_table ? row_of(p) : -1;
  };
  std::vector<TunePlan> every;
  for (const int b : gemv_values(&TileRow::rows)) every.push_back(TunePlan{0, false, 4, false, false, b});
  for (const int m : {1, 2, 3, 4, 8, 16})
    for (const bool swap : {false, true})
      for (const bool wgmma : {false, true}) every.push_back(TunePlan{0, true, m, swap, wgmma, 8});
  std::set<int> reached;
  for (const std::string target : {"h100", "rtx5090"})
    for (const TunePlan& p : every)
      if (const int row = selected(target, p); row >= 0) reached.insert(row);
  const std::vector<size_t> candidates = tune_candidates();
  std::set<int> listed(candidates.begin(), candidates.end());
  EXPECT_EQ(listed.size(), candidates.size()) << "a candidate twice";
  std::set<int> runnable_listed;
  for (const int i : listed) {
    SCOPED_TRACE(std::string(kTileTable[i].name));
    EXPECT_TRUE(kernels::row_built(kTileTable[i]));
    const auto plan = tune_plan_of(kTileTable[i]);
    ASSERT_TRUE(plan.has_value());
    if (runnable(kTileTable[i])) {
      runnable_listed.insert(i);
      EXPECT_EQ(selected(target_for(kTileTable[i]), *plan), i) << "the candidate's own plan selects it";
    }
  }
  EXPECT_EQ(reached, runnable_listed);
  EXPECT_TRUE(std::is_sorted(candidates.begin(), candidates.end())) << "in table order";
}

}  // namespace
}  // namespace mxmoe::plan
