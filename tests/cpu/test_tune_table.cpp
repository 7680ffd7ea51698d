// The planner's preference table (plan/tune_table.hpp): parsing, selection, round trip, and every
// malformed table refused with an Error naming the field.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "plan/tune_table.hpp"
#include "mxmoe/error.hpp"
#include "test_support.hpp"

namespace mxmoe {
namespace {

const char* kTable = R"({"device": "NVIDIA H200", "compute_capability": "9.0",
  "shape": {"experts": 128, "top_k": 4, "hidden": 2880, "intermediate": 2880},
  "plans": [{"max_rows_per_expert": 2.8, "family": "gemv"},
            {"max_rows_per_expert": 5.6, "family": "gemv", "batch_rows": 16},
            {"max_rows_per_expert": 22.6, "family": "mma", "m_tiles": 1},
            {"max_rows_per_expert": 40.0, "family": "mma", "m_tiles": 4, "wgmma": true},
            {"family": "mma", "m_tiles": 4, "swap_ab": true}]})";

TEST(TuneTable, SelectsThePlanOfTheRowsPerExpert) {
  const TuneTable t = parse_tune_table(kTable, "test");
  ASSERT_EQ(t.plans.size(), 5u);
  EXPECT_FALSE(t.plan_for(1.0).mma);
  EXPECT_EQ(t.plan_for(1.0).batch_rows, 8);  // absent: 8
  EXPECT_EQ(t.plan_for(2.9).batch_rows, 16);
  EXPECT_FALSE(t.plan_for(5.6).mma);
  EXPECT_TRUE(t.plan_for(5.7).mma);
  EXPECT_EQ(t.plan_for(8.0).m_tiles, 1);
  EXPECT_EQ(t.plan_for(22.7).m_tiles, 4);
  EXPECT_FALSE(t.plan_for(22.7).swap_ab);  // absent: false
  EXPECT_TRUE(t.plan_for(22.7).wgmma);
  EXPECT_FALSE(t.plan_for(8.0).wgmma);  // absent: false
  EXPECT_EQ(t.plan_for(1e9).m_tiles, 4);
  EXPECT_TRUE(t.plan_for(1e9).swap_ab);
  EXPECT_TRUE(t.matches("NVIDIA H200", "9.0", MoeConfig::gpt_oss_120b()));
  EXPECT_FALSE(t.matches("NVIDIA H100 80GB HBM3", "9.0", MoeConfig::gpt_oss_120b()));
  EXPECT_FALSE(t.matches("NVIDIA H200", "9.0", MoeConfig::gpt_oss_20b()));
}

// Every tile count has a swap-AB form, the 16-row one (m_tiles 1) included, and a table keeps it.
TEST(TuneTable, TakesTheSixteenRowSwapTile) {
  const TuneTable t = parse_tune_table(R"({"device": "x", "compute_capability": "9.0",
    "shape": {"experts": 128, "top_k": 4, "hidden": 2880, "intermediate": 2880},
    "plans": [{"max_rows_per_expert": 1.5, "family": "gemv"}, {"family": "mma", "m_tiles": 1, "swap_ab": true}]})",
                                       "t");
  EXPECT_EQ(t.plan_for(8.0).m_tiles, 1);
  EXPECT_TRUE(t.plan_for(8.0).swap_ab);
  const TuneTable back = parse_tune_table(tune_table_to_json(t), "round trip");
  EXPECT_EQ(back.plan_for(8.0).m_tiles, 1);
  EXPECT_TRUE(back.plan_for(8.0).swap_ab);
}

TEST(TuneTable, RoundTripsThroughJson) {
  const TuneTable t = parse_tune_table(kTable, "test");
  const TuneTable back = parse_tune_table(tune_table_to_json(t), "round trip");
  ASSERT_EQ(back.plans.size(), t.plans.size());
  for (size_t i = 0; i < t.plans.size(); ++i) {
    EXPECT_EQ(back.plans[i].mma, t.plans[i].mma);
    EXPECT_EQ(back.plans[i].m_tiles, t.plans[i].m_tiles);
    EXPECT_EQ(back.plans[i].swap_ab, t.plans[i].swap_ab);
    EXPECT_EQ(back.plans[i].wgmma, t.plans[i].wgmma);
    EXPECT_EQ(back.plans[i].batch_rows, t.plans[i].batch_rows);
    EXPECT_DOUBLE_EQ(back.plans[i].max_rows_per_expert, t.plans[i].max_rows_per_expert);
  }
  EXPECT_EQ(back.device, "NVIDIA H200");
  EXPECT_EQ(back.hidden, 2880);
}

TEST(TuneTable, RefusesMalformedTablesByField) {
  auto with = [](const std::string& from, const std::string& to) {
    std::string s = kTable;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  test::expect_error_naming([] { parse_tune_table("{not json", "t.json"); }, "not valid JSON");
  test::expect_error_naming([&] { parse_tune_table(with(R"("device": "NVIDIA H200",)", ""), "t"); }, "'device'");
  test::expect_error_naming([&] { parse_tune_table(with(R"("top_k": 4)", R"("top_k": "4")"), "t"); },
                            "shape.top_k must be an integer");
  test::expect_error_naming([&] { parse_tune_table(with(R"("family": "gemv")", R"("family": "cpu")"), "t"); },
                            "plans[0].family");
  test::expect_error_naming([&] { parse_tune_table(with(R"("m_tiles": 1)", R"("m_tiles": 3)"), "t"); },
                            "plans[2].m_tiles");
  test::expect_error_naming([&] { parse_tune_table(with(R"("batch_rows": 16)", R"("batch_rows": 32)"), "t"); },
                            "plans[1].batch_rows");
  test::expect_error_naming([&] { parse_tune_table(with("22.6", "5.0"), "t"); }, "increasing");
  test::expect_error_naming([&] { parse_tune_table(with(R"("swap_ab": true)", R"("swap_ab": 1)"), "t"); },
                            "plans[4].swap_ab must be true or false");
  test::expect_error_naming([&] { parse_tune_table(with(R"("wgmma": true)", R"("wgmma": "yes")"), "t"); },
                            "plans[3].wgmma must be true or false");
  test::expect_error_naming(
      [&] { parse_tune_table(with(R"("m_tiles": 4, "wgmma": true)", R"("m_tiles": 1, "wgmma": true)"), "t"); },
      "plans[3].wgmma: the wgmma tiles have m_tiles 2, 4 or 8");
  test::expect_error_naming(
      [&] { parse_tune_table(with(R"("wgmma": true)", R"("wgmma": true, "swap_ab": true)"), "t"); },
      "plans[3].wgmma: a plan is wgmma or swap_ab");
  test::expect_error_naming(
      [&] { parse_tune_table(with(R"({"family": "mma", "m_tiles": 4, "swap_ab": true})", R"({"max_rows_per_expert": 90, "family": "mma", "m_tiles": 4})"), "t"); },
      "last plan");
  test::expect_error_naming(
      [] { parse_tune_table(R"({"device": "x", "compute_capability": "9.0", "shape": {"experts": 1, "top_k": 1, "hidden": 32, "intermediate": 32}, "plans": []})", "t"); },
      "non-empty");
}

TEST(TuneTable, LoadsOnlyWhenTheFileExists) {
  EXPECT_FALSE(load_tune_table("/nonexistent/mxmoe_tune.json").has_value());
  EXPECT_FALSE(load_tune_table("").has_value());
  const std::string path = ::testing::TempDir() + "mxmoe_tune_test.json";
  std::ofstream(path) << kTable;
  const auto t = load_tune_table(path);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->plans.size(), 5u);
  std::ofstream(path) << "[]";
  test::expect_error_naming([&] { load_tune_table(path); }, path);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace mxmoe
