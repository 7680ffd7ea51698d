// The `mxmoe` command's usage errors, run as a separate process: every bad option value, negative or
// overflowing integer and bad MXMOE_* variable exits 2 with a message naming it, before any work; T = 0
// is accepted; gen-checkpoint keeps a non-empty directory unless --force; --output is checked before the
// forward; the original-naming config.json is one OpenAI's ModelConfig accepts.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "cpu/cli_test_support.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/config.hpp"
#include "mxmoe/device.hpp"
#include "mxmoe/runner.hpp"
#include "test_support.hpp"

namespace {

namespace fs = std::filesystem;
using cli_test::CliResult;
using cli_test::quote;

class CliUsageTest : public cli_test::CliTest {};

// The longest run of decimal digits in `text` (CLI11's NonNegativeNumber printed DBL_MAX, 309 digits).
size_t longest_digit_run(const std::string& text) {
  size_t longest = 0, run = 0;
  for (char c : text) {
    run = (c >= '0' && c <= '9') ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  return longest;
}

// Negative, overflowing and non-integer values for every integer option: exit 2, the option named, the
// value's range given in a few digits, nothing run (no stdout).
TEST_F(CliUsageTest, BadIntegersAreUsageErrorsNamingTheOption) {
  const uint64_t seed = mxmoe::test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const std::string negative = "-" + std::to_string(1 + rng() % 1000000000);
  std::string overflow = std::to_string(1 + rng() % 9);  // 21 to 30 digits: past int64 and uint64
  for (size_t n = 20 + rng() % 10; n > 0; --n) overflow += static_cast<char>('0' + rng() % 10);
  const std::vector<std::string> not_integers = {"1.5", "1e3", "0x10", "two", ""};

  const std::string ckpt = " --checkpoint " + quote((dir_ / "none").string());
  const std::string out = " --out " + quote((dir_ / "never").string());
  const std::string shape = " --top-k 2 --hidden 32 --intermediate 32";
  const struct {
    std::string command, option, rest;  // `mxmoe command option VALUE rest`
  } cases[] = {
      {"check", "--seed", ""},           {"check", "--tokens", ""},
      {"check", "--experts", shape},     {"check --experts 4 --hidden 32 --intermediate 32", "--top-k", ""},
      {"run", "--layer", ckpt},          {"run --layer 0", "--tokens", ckpt},
      {"run --layer 0", "--seed", ckpt}, {"gen-checkpoint --preset tiny", "--layers", out},
      {"gen-checkpoint --preset tiny --layers 1", "--seed", out},
      {"soak", "--forwards", ""},        {"soak", "--max-tokens", ""},
      {"soak", "--seed", ""},            {"bench", "--tokens", ""},
      {"bench", "--seed", ""},           {"bench", "--warmup", ""},
      {"plan --target h100", "--tokens", ""},
  };
  for (const auto& c : cases) {
    std::vector<std::string> values = {negative, overflow};
    values.push_back(not_integers[rng() % not_integers.size()]);
    for (const std::string& value : values) {
      const std::string args = c.command + " " + c.option + " " + quote(value) + c.rest;
      SCOPED_TRACE(args);
      const CliResult r = run(args);
      EXPECT_CLEAN_ERROR(r, 2);
      EXPECT_NE(r.err.find(c.option), std::string::npos) << r.err;
      EXPECT_LE(longest_digit_run(r.err), std::max<size_t>(value.size(), 20)) << r.err;
      EXPECT_TRUE(r.out.empty()) << "nothing may run on a usage error:\n" << r.out;
    }
  }
  // The largest seed is a seed.
  const CliResult top = run("check --tokens 1 --backend reference --seed 18446744073709551615");
  EXPECT_EQ(top.exit_code, 0) << top.err;
  EXPECT_NE(top.out.find("seed 18446744073709551615\n"), std::string::npos) << top.out;
}

// A shape the config refuses, a --backend, --preset or --plan that does not parse: exit 2 before any
// device is looked for (bench and soak too, which would otherwise stop at "needs a GPU").
TEST_F(CliUsageTest, BadValuesAreUsageErrors) {
  const struct {
    std::string args, named;
  } cases[] = {
      {"check --experts 4 --top-k 9 --hidden 32 --intermediate 32", "top_k"},
      {"check --experts 4 --top-k 2 --hidden 33 --intermediate 32", "hidden"},
      {"bench --experts 4 --top-k 9 --hidden 32 --intermediate 32", "top_k"},
      {"bench --experts 4", "--experts needs"},
      {"bench --preset gpt-oss-120b --intermediate 1440", "need --experts"},
      {"bench --backend nope", "--backend"},
      {"bench --preset gpt-oss-7b", "--preset"},
      {"soak --backend nope", "--backend"},
      {"soak --preset gpt-oss-7b", "--preset"},
      {"plan --target h100 --plan bogus=1", "--plan"},
      {"plan --target h100 --plan mma=swap999", "mma=swap999"},
      {"plan --target h100 --backend reference", "--backend"},
      {"gen-checkpoint --preset tiny --layers 1 --naming gguf --out x", "--naming"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.args);
    const CliResult r = run(c.args);
    EXPECT_CLEAN_ERROR(r, 2);
    EXPECT_NE(r.err.find(c.named), std::string::npos) << r.err;
  }
}

// A bad MXMOE_BACKEND, MXMOE_PLAN or MXMOE_LOG is what the user typed too: exit 2, the variable named
// first, for every command that runs the layer, with or without a GPU.
TEST_F(CliUsageTest, BadEnvironmentIsAUsageErrorNamingTheVariable) {
  const fs::path ckpt = make_checkpoint("env", 1);
  const std::vector<std::string> commands = {"check --tokens 2", "run --layer 0 --checkpoint " + quote(ckpt.string()),
                                             "bench --tokens 1", "soak --forwards 1"};
  const std::map<std::string, std::string> bad = {
      {"MXMOE_BACKEND", "nope"}, {"MXMOE_PLAN", "nope"}, {"MXMOE_LOG", "verbose"}};
  for (const std::string& command : commands)
    for (const auto& [variable, value] : bad) {
      SCOPED_TRACE(variable + "=" + value + " mxmoe " + command);
      const CliResult r = run(command, variable + "=" + value);
      EXPECT_CLEAN_ERROR(r, 2);
      EXPECT_EQ(r.err.rfind("error: " + variable, 0), 0u) << r.err;
      EXPECT_NE(r.err.find(value), std::string::npos) << r.err;
    }
  const CliResult backends = run("check", "MXMOE_BACKEND=nope");
  for (const std::string& name : mxmoe::backend_names())
    EXPECT_NE(backends.err.find(name), std::string::npos) << name << " missing from: " << backends.err;
}

// T = 0 is a valid batch: check passes with an empty output, run writes an empty file.
TEST_F(CliUsageTest, ZeroTokensRun) {
  const uint64_t seed = mxmoe::test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const std::string backend : {" --backend reference", ""}) {  // "": every backend available here
    const CliResult r = run("check --tokens 0 --seed " + std::to_string(seed) + backend);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find(", 0 tokens, seed "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\nreference    fp64 "), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("FAIL"), std::string::npos) << r.out;
  }
  const fs::path ckpt = make_checkpoint("zero", 1);
  const fs::path out_file = dir_ / "out.bin";
  cli_test::write_bf16(out_file, std::vector<uint16_t>(7, 0x3f80));  // overwritten with nothing
  CliResult r = run("run --checkpoint " + quote(ckpt.string()) + " --layer 0 --tokens 0 --output " +
                    quote(out_file.string()));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("shape: 0 tokens"), std::string::npos) << r.out;
  EXPECT_EQ(fs::file_size(out_file), 0u);
  // An empty --input is T = 0 too.
  cli_test::write_bf16(dir_ / "empty.bin", {});
  r = run("run --checkpoint " + quote(ckpt.string()) + " --layer 0 --backend reference --input " +
          quote((dir_ / "empty.bin").string()));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("shape: 0 tokens"), std::string::npos) << r.out;
}

// --output is checked before the checkpoint is read and the forward runs.
TEST_F(CliUsageTest, OutputIsCheckedBeforeTheForward) {
  const fs::path ckpt = make_checkpoint("output", 1);
  for (const fs::path& bad : {dir_ / "missing" / "out.bin", dir_}) {
    SCOPED_TRACE(bad.string());
    const CliResult r = run("run --checkpoint " + quote(ckpt.string()) + " --layer 0 --output " + quote(bad.string()));
    EXPECT_CLEAN_ERROR(r, 2);
    EXPECT_EQ(r.err.rfind("error: --output", 0), 0u) << r.err;
    EXPECT_EQ(r.out.find("time:"), std::string::npos) << "the forward ran first:\n" << r.out;
  }
  EXPECT_FALSE(fs::exists(dir_ / "missing"));
}

// gen-checkpoint writes into a new or empty directory; a non-empty one (a real model's, say) is left as
// it was unless --force, which replaces config.json and model.safetensors and keeps the rest.
TEST_F(CliUsageTest, GenCheckpointRefusesANonEmptyDirectoryWithoutForce) {
  const fs::path dir = dir_ / "model";
  fs::create_directories(dir);
  { std::ofstream(dir / "config.json") << "sentinel"; }
  { std::ofstream(dir / "keep.txt") << "keep"; }
  const std::string args = "gen-checkpoint --preset tiny --layers 1 --seed 5 --out " + quote(dir.string());
  CliResult r = run(args);
  EXPECT_CLEAN_ERROR(r, 2);
  EXPECT_NE(r.err.find("--out"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--force"), std::string::npos) << r.err;
  EXPECT_EQ(cli_test::read_text(dir / "config.json"), "sentinel");
  EXPECT_FALSE(fs::exists(dir / "model.safetensors"));

  r = run(args + " --force");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(cli_test::read_text(dir / "keep.txt"), "keep");
  EXPECT_EQ(mxmoe::Checkpoint(dir).config().num_layers, 1);

  fs::create_directories(dir_ / "empty");  // an existing empty directory is fine
  EXPECT_EQ(run("gen-checkpoint --preset tiny --layers 1 --out " + quote((dir_ / "empty").string())).exit_code, 0);
  { std::ofstream(dir_ / "file") << "x"; }
  EXPECT_CLEAN_ERROR(run("gen-checkpoint --preset tiny --layers 1 --out " + quote((dir_ / "file").string())), 2);
}

// The fields of OpenAI's ModelConfig, a dataclass in github.com/openai/gpt-oss gpt_oss/torch/model.py
// (read at commit 0568dfc94f09469e2968c2b90e50561d1b3fc424), and whether each is an int or a float.
// Transformer.from_checkpoint builds it as ModelConfig(**json.load(config.json)), so any other key is a
// TypeError there, and every field has a default.
const std::map<std::string, bool /*integer*/> kModelConfigFields = {
    {"num_hidden_layers", true},   {"num_experts", true},        {"experts_per_token", true},
    {"vocab_size", true},          {"hidden_size", true},        {"intermediate_size", true},
    {"swiglu_limit", false},       {"head_dim", true},           {"num_attention_heads", true},
    {"num_key_value_heads", true}, {"sliding_window", true},     {"initial_context_length", true},
    {"rope_theta", false},         {"rope_scaling_factor", false}, {"rope_ntk_alpha", false},
    {"rope_ntk_beta", false}};

TEST_F(CliUsageTest, OriginalNamingConfigIsOneOpenAisModelConfigAccepts) {
  const uint64_t seed = mxmoe::test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int layers = 1 + static_cast<int>(seed % 3);
  const fs::path dir = dir_ / "original";
  const CliResult r = run("gen-checkpoint --preset tiny --naming original --layers " + std::to_string(layers) +
                          " --seed " + std::to_string(seed) + " --out " + quote(dir.string()));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json config = nlohmann::json::parse(cli_test::read_text(dir / "config.json"));
  ASSERT_TRUE(config.is_object());
  for (const auto& [key, value] : config.items()) {
    const auto field = kModelConfigFields.find(key);
    ASSERT_NE(field, kModelConfigFields.end()) << "ModelConfig has no field '" << key << "': " << config.dump();
    if (field->second) EXPECT_TRUE(value.is_number_integer()) << key << " = " << value.dump();
    else EXPECT_TRUE(value.is_number()) << key << " = " << value.dump();
  }
  // The MoE fields the layer needs are all there, with the preset's values.
  const mxmoe::MoeConfig tiny = mxmoe::MoeConfig::tiny();
  EXPECT_EQ(config.value("num_hidden_layers", -1), layers);
  EXPECT_EQ(config.value("num_experts", -1), tiny.num_experts);
  EXPECT_EQ(config.value("experts_per_token", -1), tiny.top_k);
  EXPECT_EQ(config.value("hidden_size", -1), tiny.hidden);
  EXPECT_EQ(config.value("intermediate_size", -1), tiny.intermediate);
  EXPECT_EQ(config.value("swiglu_limit", -1.0), tiny.swiglu_limit);
  // And mxmoe reads it back as the original release.
  const mxmoe::Checkpoint checkpoint(dir);
  EXPECT_EQ(checkpoint.naming(), mxmoe::TensorNaming::Original);
  EXPECT_EQ(checkpoint.config().num_layers, layers);
}

// Without a driver the probe and every command say so in those words, not "driver version is
// insufficient" (the CUDA runtime's name for it).
TEST_F(CliUsageTest, NoDriverIsSaidPlainly) {
  if (mxmoe::probe().driver_version != 0) GTEST_SKIP() << "an NVIDIA driver is installed here";
  for (const std::string args : {"probe", "check --tokens 1 --seed 1"}) {
    const CliResult r = run(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("no NVIDIA GPU or driver found"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("insufficient"), std::string::npos) << r.out;
  }
  const CliResult gpu = run("check --backend gemv");
  EXPECT_CLEAN_ERROR(gpu, 1);
  EXPECT_NE(gpu.err.find("no NVIDIA GPU or driver found"), std::string::npos) << gpu.err;
}

}  // namespace
