// Architecture names and the rules of which cubin runs where: the part of the probe that decides
// whether a GB10 (12.1) gets sm_121a kernels or none, testable without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mxmoe/device.hpp"
#include "mxmoe/error.hpp"

namespace {

TEST(Arch, CanonicalNames) {
  EXPECT_EQ(mxmoe::canonical_arch("90a"), "sm_90a");
  EXPECT_EQ(mxmoe::canonical_arch("sm_90a"), "sm_90a");
  EXPECT_EQ(mxmoe::canonical_arch("89"), "sm_89");
  EXPECT_EQ(mxmoe::canonical_arch("120a-real"), "sm_120a");
  EXPECT_EQ(mxmoe::canonical_arch("compute_121f"), "sm_121f");
  EXPECT_EQ(mxmoe::canonical_arch("sm_121a-virtual"), "sm_121a");
  EXPECT_EQ(mxmoe::canonical_arch("100f"), "sm_100f");
}

TEST(Arch, JunkIsAnErrorNamingTheArgument) {
  for (const std::string junk : {"", "sm_", "9", "090", "1200", "sm_90b", "90aa", "sm_sm_90", "compute_", "a",
                                 "sm_90a-real-real", "12 0", "-real", "sm_9x"}) {
    try {
      mxmoe::canonical_arch(junk);
      ADD_FAILURE() << "accepted '" << junk << "'";
    } catch (const mxmoe::Error& e) {
      EXPECT_NE(std::string(e.what()).find("arch: '" + junk + "'"), std::string::npos) << e.what();
    }
  }
}

TEST(Arch, BestTargetIsTheArchSpecificOneFromHopperOn) {
  EXPECT_EQ(mxmoe::best_target_for(12, 1), "sm_121a");  // GB10: not sm_120a, not plain sm_121
  EXPECT_EQ(mxmoe::best_target_for(12, 0), "sm_120a");
  EXPECT_EQ(mxmoe::best_target_for(9, 0), "sm_90a");
  EXPECT_EQ(mxmoe::best_target_for(10, 0), "sm_100a");
  EXPECT_EQ(mxmoe::best_target_for(8, 9), "sm_89");
  EXPECT_EQ(mxmoe::best_target_for(8, 0), "sm_80");
}

// The family target that carries the native MX atom (arch_features.cuh) runs on every SM12x GPU.
TEST(Arch, FamilyTargetIsSm120fForEverySm12xGpuAndNoneForHopper) {
  EXPECT_EQ(mxmoe::family_target_for(12, 0), "sm_120f");
  EXPECT_EQ(mxmoe::family_target_for(12, 1), "sm_120f");
  EXPECT_TRUE(mxmoe::cubin_runs_on(mxmoe::family_target_for(12, 1), 12, 1));
  EXPECT_EQ(mxmoe::family_target_for(9, 0), "");  // wgmma: sm_90a only
  EXPECT_EQ(mxmoe::family_target_for(8, 9), "");
}

TEST(Arch, ArchSpecificCubinsRunOnlyOnTheirChip) {
  EXPECT_TRUE(mxmoe::cubin_runs_on("sm_121a", 12, 1));
  EXPECT_FALSE(mxmoe::cubin_runs_on("sm_120a", 12, 1));  // the SM120 cubin does not load on a GB10
  EXPECT_FALSE(mxmoe::cubin_runs_on("sm_121a", 12, 0));
  EXPECT_TRUE(mxmoe::cubin_runs_on("sm_90a", 9, 0));
  EXPECT_FALSE(mxmoe::cubin_runs_on("sm_90a", 10, 0));
}

TEST(Arch, PlainAndFamilyCubinsRunOnLaterMinorsOfTheirMajor) {
  EXPECT_TRUE(mxmoe::cubin_runs_on("sm_120", 12, 1));
  EXPECT_TRUE(mxmoe::cubin_runs_on("sm_120f", 12, 1));
  EXPECT_FALSE(mxmoe::cubin_runs_on("sm_121", 12, 0));
  EXPECT_FALSE(mxmoe::cubin_runs_on("sm_121f", 12, 0));
  EXPECT_TRUE(mxmoe::cubin_runs_on("sm_80", 8, 9));
  EXPECT_FALSE(mxmoe::cubin_runs_on("sm_80", 9, 0));  // SASS never crosses a major version
  EXPECT_FALSE(mxmoe::cubin_runs_on("sm_89", 8, 6));
}

// PTX crosses majors upward (the driver compiles it at first use); `a` PTX runs only where its cubin does.
TEST(Arch, PlainPtxRunsOnEveryLaterDevice) {
  EXPECT_TRUE(mxmoe::ptx_runs_on("80", 9, 0));
  EXPECT_TRUE(mxmoe::ptx_runs_on("compute_89", 12, 1));
  EXPECT_TRUE(mxmoe::ptx_runs_on("80", 8, 0));
  EXPECT_FALSE(mxmoe::ptx_runs_on("89", 8, 6));
  EXPECT_FALSE(mxmoe::ptx_runs_on("90a", 12, 0));
  EXPECT_TRUE(mxmoe::ptx_runs_on("90a", 9, 0));
  EXPECT_TRUE(mxmoe::ptx_runs_on("120f", 12, 1));
  EXPECT_FALSE(mxmoe::ptx_runs_on("121f", 12, 0));
}

// The code a device runs from a build: its best cubin, else its newest PTX; none without either.
TEST(Arch, CodeArchIsTheBestCubinElseTheNewestPtx) {
  using V = std::vector<std::string>;
  EXPECT_EQ(mxmoe::code_arch_for(V{"80", "90a", "120a"}, 9, 0), 90);
  EXPECT_EQ(mxmoe::code_arch_for(V{"80", "89"}, 8, 9), 89);
  EXPECT_EQ(mxmoe::code_arch_for(V{"80", "89"}, 8, 6), 80);       // the sm_80 cubin
  EXPECT_EQ(mxmoe::code_arch_for(V{"80-virtual"}, 9, 0), 80);     // a Hopper runs compute_80 through the JIT
  EXPECT_EQ(mxmoe::code_arch_for(V{"80", "89"}, 9, 0), 89);       // the newest PTX
  EXPECT_EQ(mxmoe::code_arch_for(V{"80-real"}, 9, 0), 0);         // SASS only: nothing runs there
  EXPECT_EQ(mxmoe::code_arch_for(V{"90a", "120a", "121a"}, 8, 9), 0);
  EXPECT_EQ(mxmoe::code_arch_for(V{"90a", "120a", "121a"}, 12, 1), 121);
  EXPECT_EQ(mxmoe::code_arch_for(V{"90a-real", "120a"}, 12, 1), 0);  // compute_120a PTX is not for 12.1
}

TEST(Arch, ProbeNamesCompiledArchsCanonically) {
  for (const auto& arch : mxmoe::probe().compiled_archs) EXPECT_EQ(mxmoe::canonical_arch(arch), arch);
}

}  // namespace
