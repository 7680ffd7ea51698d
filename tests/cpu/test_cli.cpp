// The `mxmoe` command, run as a separate process: commands, output, checkpoints, and bad input handled
// as an error (never a crash). Usage errors and their exit code 2: test_cli_usage.cpp. The sanitizer
// build runs these too, so the CLI's error paths run under ASan/UBSan.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "cpu/cli_test_support.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/device.hpp"
#include "mxmoe/formats.hpp"
#include "mxmoe/reference.hpp"
#include "mxmoe/runner.hpp"

namespace fs = std::filesystem;
using cli_test::CliResult;
using cli_test::quote;
using cli_test::read_bf16;
using cli_test::read_text;
using cli_test::sanitizer_report;
using cli_test::write_bf16;
using CliTest = cli_test::CliTest;

namespace {

TEST_F(CliTest, HelpExitsZeroAndListsCommands) {
  const CliResult r = run("--help");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const char* command : {"check", "probe", "gen-checkpoint", "run", "bench", "soak"})
    EXPECT_NE(r.out.find(command), std::string::npos) << command << " missing from:\n" << r.out;
}

TEST_F(CliTest, EverySubcommandHasHelp) {
  for (const std::string command : {"check", "probe", "gen-checkpoint", "run", "bench", "soak"}) {
    const CliResult r = run(command + " --help");
    EXPECT_EQ(r.exit_code, 0) << command << ": " << r.err;
    EXPECT_NE(r.out.find("Usage: mxmoe " + command), std::string::npos) << r.out;
  }
}

TEST_F(CliTest, NoSubcommandIsAUsageError) {
  const CliResult r = run("");
  EXPECT_CLEAN_ERROR(r, 2);
}

TEST_F(CliTest, UnknownSubcommandIsAUsageErrorNamingTheValidOnes) {
  const CliResult r = run("nope");
  EXPECT_CLEAN_ERROR(r, 2);
  EXPECT_NE(r.err.find("'nope'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("gen-checkpoint"), std::string::npos) << r.err;
}

TEST_F(CliTest, UnknownOptionIsAUsageError) {
  const CliResult r = run("check --no-such-option");
  EXPECT_CLEAN_ERROR(r, 2);
  EXPECT_NE(r.err.find("--no-such-option"), std::string::npos) << r.err;
}

TEST_F(CliTest, CheckTinyPasses) {
  const CliResult r = run("check --preset tiny --seed 1");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("oracle fp64: the fp64 CPU reference"), std::string::npos) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\nreference +fp64 +\S+ +\S+ +\S+ +\S+ ms +PASS\n)"))) << r.out;
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("8 tokens, seed 1\n"), std::string::npos) << r.out;
  const bool says_cpu_only = r.out.find("no GPU: ran the CPU reference only (") != std::string::npos;
  EXPECT_EQ(says_cpu_only, !mxmoe::gpu_available()) << r.out;
  // With a GPU, every backend the probe calls runnable is checked too.
  const mxmoe::ProbeResult probed = mxmoe::probe();  // kept alive: the loop below reads into it
  if (mxmoe::gpu_available())
    for (const std::string& backend : probed.gpus.at(0).runnable_backends) {
      // The MXFP8 backends are held against the oracle that quantises as they do, and their error against
      // the plain fp64 one is printed on the next line.
      const bool mx = mxmoe::backend_uses_mxfp8(mxmoe::parse_backend(backend));
      const std::string oracle = mx ? "fp64-mxfp8" : "fp64";
      EXPECT_TRUE(std::regex_search(r.out, std::regex("\n" + backend + " +" + oracle + R"( +\S+ +\S+ +\S+ +\S+ ms +PASS\n)")))
          << r.out;
      if (mx) EXPECT_TRUE(std::regex_search(r.out, std::regex("\n  " + backend + " against fp64: max_abs_err \\S+, rel_err [0-9]")))
          << r.out;
    }
}

TEST_F(CliTest, CheckPrintsTheRandomSeedItChose) {
  const CliResult r = run("check --tokens 2");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(2 tokens, seed [0-9]+\n)"))) << r.out;
}

TEST_F(CliTest, CheckExplicitShape) {
  const CliResult r = run("check --experts 4 --top-k 3 --hidden 32 --intermediate 96 --tokens 5 --seed 2");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("experts 4, top-k 3, hidden 32, intermediate 96"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("PASS"), std::string::npos) << r.out;
}

TEST_F(CliTest, CheckPartialOrConflictingShapeIsAUsageError) {
  EXPECT_CLEAN_ERROR(run("check --experts 4"), 2);
  EXPECT_CLEAN_ERROR(run("check --preset tiny --experts 4 --top-k 2 --hidden 32 --intermediate 32"), 2);
  EXPECT_CLEAN_ERROR(run("check --preset gpt-oss-7b"), 2);
}

TEST_F(CliTest, CheckInvalidShapeIsAUsageErrorNamingTheField) {
  const CliResult r = run("check --experts 4 --top-k 9 --hidden 32 --intermediate 32");
  EXPECT_CLEAN_ERROR(r, 2);
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("top_k"), std::string::npos) << r.err;
}

TEST_F(CliTest, BadBackendListsTheValidNames) {
  for (const std::string command : {"check --backend nope", "run --checkpoint x --layer 0 --backend nope"}) {
    const CliResult r = run(command);
    EXPECT_CLEAN_ERROR(r, 2);
    for (const std::string& name : mxmoe::backend_names())
      EXPECT_NE(r.err.find(name), std::string::npos) << command << ": '" << name << "' missing from: " << r.err;
  }
}

TEST_F(CliTest, BadBackendEnvironmentIsAUsageErrorNamingTheVariable) {
  const fs::path ckpt = make_checkpoint("env");
  for (const std::string& command : std::vector<std::string>{"check", "run --layer 0 --checkpoint " + quote(ckpt.string())}) {
    const CliResult r = run(command, "MXMOE_BACKEND=nope");
    EXPECT_CLEAN_ERROR(r, 2);
    EXPECT_EQ(r.err.rfind("error: MXMOE_BACKEND", 0), 0u) << command << ": " << r.err;
    EXPECT_NE(r.err.find("nope"), std::string::npos) << r.err;
  }
  const CliResult ok = run("check --seed 3", "MXMOE_BACKEND=reference");
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
}

TEST_F(CliTest, GpuBackendWithoutGpuIsAnError) {
  if (mxmoe::gpu_available()) GTEST_SKIP() << "a GPU is present";
  const CliResult r = run("check --backend gemv");
  EXPECT_CLEAN_ERROR(r, 1);
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("gemv"), std::string::npos) << r.err;
}

TEST_F(CliTest, SoakWithoutGpuIsAnErrorAndBadCountsAreUsageErrors) {
  if (!mxmoe::gpu_available()) {
    const CliResult r = run("soak --forwards 3");
    EXPECT_CLEAN_ERROR(r, 1);
    EXPECT_NE(r.err.find("soak: needs a usable GPU"), std::string::npos) << r.err;
  }
  EXPECT_CLEAN_ERROR(run("soak --forwards 0"), 2);
  EXPECT_CLEAN_ERROR(run("soak --max-tokens -5"), 2);
}

TEST_F(CliTest, BenchBadTimingOptionsAreUsageErrors) {
  const struct {
    const char* args;
    const char* option;  // the option the error must name
  } cases[] = {{"bench --warmup-ms -1", "--warmup-ms"},
               {"bench --warmup-ms 1e9", "--warmup-ms"},
               {"bench --warmup-ms soon", "--warmup-ms"},
               {"bench --iterations 3", "--iterations"}};
  for (const auto& c : cases) {
    const CliResult r = run(c.args);
    EXPECT_CLEAN_ERROR(r, 2);
    EXPECT_NE(r.err.find(c.option), std::string::npos) << c.args << ": " << r.err;
  }
}

// The planner for a named target runs on any machine; an SM12x target gets no wgmma tile and no cluster.
TEST_F(CliTest, PlanForATargetNeedsNoGpuAndNamesOnlyItsTiles) {
  const CliResult gb10 = run("plan --target gb10 --tokens 1,4096");
  ASSERT_EQ(gb10.exit_code, 0) << gb10.err;
  EXPECT_NE(gb10.out.find("T = 1: gemv"), std::string::npos) << gb10.out;
  EXPECT_NE(gb10.out.find("T = 4096: mma bf16 swap-AB"), std::string::npos) << gb10.out;
  const size_t plans = gb10.out.find("T = 1:");
  EXPECT_EQ(gb10.out.find("wgmma", plans), std::string::npos) << gb10.out;
  EXPECT_EQ(gb10.out.find("cluster", plans), std::string::npos) << gb10.out;
  const CliResult h100 = run("plan --target h100 --tokens 4096");
  ASSERT_EQ(h100.exit_code, 0) << h100.err;
  EXPECT_NE(h100.out.find("T = 4096: wgmma bf16"), std::string::npos) << h100.out;
  EXPECT_CLEAN_ERROR(run("plan --target b200"), 2);
  // Ampere and Ada: the GEMV family, then the mma.sync tiles; fp8 is the MXFP8 path on SM89 only.
  const CliResult a100 = run("plan --target a100 --tokens 1,4096");
  ASSERT_EQ(a100.exit_code, 0) << a100.err;
  EXPECT_NE(a100.out.find("T = 1: gemv"), std::string::npos) << a100.out;
  EXPECT_NE(a100.out.find("T = 4096: mma bf16 swap-AB"), std::string::npos) << a100.out;
  EXPECT_EQ(a100.out.find("cluster", a100.out.find("T = 1:")), std::string::npos) << a100.out;
  const CliResult ada_fp8 = run("plan --target rtx4090 --precision fp8 --tokens 64");
  ASSERT_EQ(ada_fp8.exit_code, 0) << ada_fp8.err;
  EXPECT_NE(ada_fp8.out.find("backend auto (mx-emulated)"), std::string::npos) << ada_fp8.out;
  EXPECT_CLEAN_ERROR(run("plan --target a100 --precision fp8"), 1);  // no FP8 MMA on SM80
  if (!mxmoe::gpu_available()) {  // check --target runs the plan on a GPU, and says where to print it instead
    const CliResult check = run("check --target gb10");
    EXPECT_CLEAN_ERROR(check, 1);
    EXPECT_NE(check.err.find("mxmoe plan --target gb10"), std::string::npos) << check.err;
  }
  EXPECT_CLEAN_ERROR(run("check --target b200"), 2);
  // An expert-parallel rank's plan: at T = 1024 rank 0 of 2 has 32 rows per expert, as one GPU has.
  const CliResult ep = run("plan --target h200 --tokens 1024 --ep 2");
  const CliResult whole = run("plan --target h200 --tokens 1024");
  ASSERT_EQ(ep.exit_code, 0) << ep.err;
  EXPECT_NE(ep.out.find("expert-parallel rank 0 of 2 (of 128 experts)"), std::string::npos) << ep.out;
  const auto plan_line = [](const std::string& out) { return out.substr(out.find("T = 1024:")); };
  EXPECT_EQ(plan_line(ep.out), plan_line(whole.out));
  EXPECT_CLEAN_ERROR(run("plan --target h200 --ep 64"), 2);  // 128 experts / k = 4: at most 32 ranks
  // fp8: the W4A8 wgmma tiles on Hopper targets, the MXFP8 path on SM12x ones.
  const CliResult fp8 = run("plan --target h100 --precision fp8 --tokens 1,4096");
  ASSERT_EQ(fp8.exit_code, 0) << fp8.err;
  EXPECT_NE(fp8.out.find("T = 1: wgmma fp8 (W4A8) 256x32x128"), std::string::npos) << fp8.out;
  EXPECT_NE(fp8.out.find("T = 4096: wgmma fp8 (W4A8) 192x192x128"), std::string::npos) << fp8.out;
  const CliResult fp8_gb10 = run("plan --target gb10 --precision fp8 --tokens 1");
  ASSERT_EQ(fp8_gb10.exit_code, 0) << fp8_gb10.err;
  EXPECT_NE(fp8_gb10.out.find("T = 1: mx native"), std::string::npos) << fp8_gb10.out;
  EXPECT_CLEAN_ERROR(run("plan --target h100 --precision fp16"), 2);
  EXPECT_CLEAN_ERROR(run("plan --target h100 --precision fp8 --backend mma"), 1);
  const CliResult forced = run("plan --target gb10 --plan mma=wgmma64");
  EXPECT_CLEAN_ERROR(forced, 1);
  EXPECT_NE(forced.err.find("mma=wgmma64"), std::string::npos) << forced.err;
}

TEST_F(CliTest, ProbeText) {
  const CliResult r = run("probe");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("compiled archs: "), std::string::npos) << r.out;
}

TEST_F(CliTest, ProbeJsonMatchesTheLibrary) {
  const CliResult r = run("probe --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(r.out)) << r.out;
  EXPECT_EQ(j.at("gpu_available").get<bool>(), mxmoe::gpu_available());
  if (!mxmoe::gpu_available()) EXPECT_FALSE(j.at("no_gpu_reason").get<std::string>().empty());

  const auto archs = j.at("compiled_archs").get<std::vector<std::string>>();
  ASSERT_FALSE(archs.empty());
  for (const auto& arch : archs) EXPECT_TRUE(std::regex_match(arch, std::regex("sm_[0-9]{2,3}[af]?"))) << arch;
  // The same build: the CLI reports what the library was compiled for.
  EXPECT_EQ(archs, mxmoe::probe().compiled_archs);
  // The default build carries the SM120/SM121 native targets next to Hopper's.
  if (archs.size() == 3) {
    EXPECT_EQ(archs, (std::vector<std::string>{"sm_90a", "sm_120a", "sm_121a"}));
  }
}

TEST_F(CliTest, GenCheckpointThenRunMatchesTheLibraryReference) {
  for (const std::string naming : {"hf", "original"}) {
    const fs::path ckpt = make_checkpoint("ckpt_" + naming, 2, naming);
    ASSERT_TRUE(fs::exists(ckpt / "config.json"));
    ASSERT_TRUE(fs::exists(ckpt / "model.safetensors"));

    // Hidden states from this test, so the output can be recomputed here.
    constexpr int64_t kTokens = 5;
    const mxmoe::MoeConfig tiny = mxmoe::MoeConfig::tiny();
    std::mt19937_64 rng(11);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<uint16_t> hidden(static_cast<size_t>(kTokens * tiny.hidden));
    for (auto& v : hidden) v = mxmoe::float_to_bf16(dist(rng));
    write_bf16(dir_ / "in.bin", hidden);

    const fs::path out_file = dir_ / ("out_" + naming + ".bin");
    const CliResult r = run("run --checkpoint " + quote(ckpt.string()) + " --layer 1 --backend reference --input " +
                            quote((dir_ / "in.bin").string()) + " --output " + quote(out_file.string()));
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("backend: reference"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("plan: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("shape: 5 tokens"), std::string::npos) << r.out;

    const mxmoe::Checkpoint checkpoint(ckpt);
    EXPECT_EQ(checkpoint.naming(), naming == "hf" ? mxmoe::TensorNaming::HuggingFace : mxmoe::TensorNaming::Original);
    const mxmoe::MoeLayerData layer = checkpoint.load_layer(1);
    const mxmoe::MoeConfig& config = checkpoint.config().moe;
    std::vector<float> logits(static_cast<size_t>(kTokens * config.num_experts));
    mxmoe::reference_router_logits(config, hidden, kTokens, layer.router_weight, layer.router_bias, logits);
    std::vector<uint16_t> expected(hidden.size());
    mxmoe::reference_moe(config, layer.view(), hidden, logits, kTokens, expected);
    EXPECT_EQ(read_bf16(out_file), expected) << "the CLI's output differs from the library reference";
  }
}

TEST_F(CliTest, RunWithTheSameSeedIsReproducible) {
  const fs::path ckpt = make_checkpoint("seeded");
  const std::string args = "run --checkpoint " + quote(ckpt.string()) + " --layer 0 --tokens 3 --seed 9";
  const CliResult a = run(args);
  const CliResult b = run(args);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  std::smatch ma, mb;
  ASSERT_TRUE(std::regex_search(a.out, ma, std::regex("fnv1a [0-9a-f]{16}"))) << a.out;
  ASSERT_TRUE(std::regex_search(b.out, mb, std::regex("fnv1a [0-9a-f]{16}"))) << b.out;
  EXPECT_EQ(ma.str(), mb.str());
}

TEST_F(CliTest, RunRejectsBadArguments) {
  const fs::path ckpt = make_checkpoint("bad_args");
  const std::string base = "run --checkpoint " + quote(ckpt.string());

  CliResult r = run(base + " --layer 2");  // past the last layer: what was typed is wrong
  EXPECT_CLEAN_ERROR(r, 2);
  EXPECT_NE(r.err.find("--layer"), std::string::npos) << r.err;

  write_bf16(dir_ / "odd.bin", std::vector<uint16_t>(100, 0x3f80));  // 100 values: not a multiple of hidden 64
  r = run(base + " --layer 0 --input " + quote((dir_ / "odd.bin").string()));
  EXPECT_CLEAN_ERROR(r, 2);
  EXPECT_NE(r.err.find("--input"), std::string::npos) << r.err;
  r = run(base + " --layer 0 --tokens 2 --input " + quote((dir_ / "odd.bin").string()));
  EXPECT_CLEAN_ERROR(r, 2);
  EXPECT_NE(r.err.find("--input"), std::string::npos) << r.err;

  EXPECT_CLEAN_ERROR(run(base), 2);  // --layer is required
  r = run("run --layer 0 --checkpoint " + quote((dir_ / "missing").string()));
  EXPECT_CLEAN_ERROR(r, 1);
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
}

TEST_F(CliTest, CorruptedCheckpointIsAnErrorNeverACrash) {
  const fs::path good = make_checkpoint("good", 1);
  const auto full_size = static_cast<int64_t>(fs::file_size(good / "model.safetensors"));
  ASSERT_GT(full_size, 1000);
  // Truncations: empty, inside the length prefix, inside the JSON header, inside the data, one byte short.
  for (const int64_t size : {int64_t{0}, int64_t{4}, int64_t{100}, full_size / 2, full_size - 1}) {
    const fs::path bad = dir_ / ("truncated_" + std::to_string(size));
    fs::copy(good, bad);
    fs::resize_file(bad / "model.safetensors", static_cast<uintmax_t>(size));
    const CliResult r = run("run --checkpoint " + quote(bad.string()) + " --layer 0");
    EXPECT_CLEAN_ERROR(r, 1);
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << "size " << size << ": " << r.err;
    EXPECT_NE(r.err.find("model.safetensors"), std::string::npos) << "size " << size << ": " << r.err;
  }

  // A header length far past the end of the file.
  const fs::path huge = dir_ / "huge_header";
  fs::copy(good, huge);
  {
    std::fstream f(huge / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    const char length[8] = {0, 0, 0, 0, 0, 0, 0, 0x40};
    f.write(length, 8);
  }
  CliResult r = run("run --checkpoint " + quote(huge.string()) + " --layer 0");
  EXPECT_CLEAN_ERROR(r, 1);
  EXPECT_NE(r.err.find("model.safetensors"), std::string::npos) << r.err;

  // No config.json.
  const fs::path no_config = dir_ / "no_config";
  fs::copy(good, no_config);
  fs::remove(no_config / "config.json");
  r = run("run --checkpoint " + quote(no_config.string()) + " --layer 0");
  EXPECT_CLEAN_ERROR(r, 1);
  EXPECT_NE(r.err.find("config.json"), std::string::npos) << r.err;
}

TEST_F(CliTest, GenCheckpointNeedsItsArguments) {
  EXPECT_CLEAN_ERROR(run("gen-checkpoint --preset tiny --layers 1"), 2);
  EXPECT_CLEAN_ERROR(run("gen-checkpoint --preset tiny --layers 0 --out " + quote((dir_ / "x").string())), 2);
  EXPECT_CLEAN_ERROR(run("gen-checkpoint --preset tiny --layers 1 --naming gguf --out " + quote((dir_ / "x").string())), 2);
}

}  // namespace
