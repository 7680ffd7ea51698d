#pragma once
// The `mxmoe` command run as a separate process, for test_cli.cpp and test_cli_usage.cpp: its exit
// code, stdout and stderr, a scratch directory, and tiny checkpoints.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#ifndef MXMOE_CLI_PATH
#error "MXMOE_CLI_PATH (the built mxmoe binary) must be defined by the build"
#endif

namespace cli_test {

namespace fs = std::filesystem;

struct CliResult {
  int exit_code = -1;  // 128 + signal when killed by a signal
  std::string out, err;
};

inline std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

inline std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline std::vector<uint16_t> read_bf16(const fs::path& path) {
  const std::string bytes = read_text(path);
  std::vector<uint16_t> values(bytes.size() / 2);
  if (!values.empty()) std::memcpy(values.data(), bytes.data(), values.size() * 2);
  return values;
}

inline void write_bf16(const fs::path& path, const std::vector<uint16_t>& values) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * 2));
}

inline bool sanitizer_report(const std::string& text) {
  return text.find("Sanitizer") != std::string::npos || text.find("runtime error:") != std::string::npos;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "mxmoe_cli_XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Runs `env_prefix mxmoe args`; stdout through the pipe, stderr through a file.
  CliResult run(const std::string& args, const std::string& env_prefix = "") {
    const fs::path err_file = dir_ / "stderr.txt";
    // The runner's variables from the caller's environment must not change what these tests see.
    const std::string command = "env -u MXMOE_BACKEND -u MXMOE_PLAN -u MXMOE_TUNE_FILE -u MXMOE_LOG " + env_prefix +
                                " " + quote(MXMOE_CLI_PATH) + " " + args + " 2>" + quote(err_file.string());
    CliResult result;
    FILE* pipe = popen(command.c_str(), "r");
    if (pipe == nullptr) return result;
    char buffer[4096];
    for (size_t n; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) result.out.append(buffer, n);
    const int status = pclose(pipe);
    if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
    else if (WIFSIGNALED(status)) result.exit_code = 128 + WTERMSIG(status);
    result.err = read_text(err_file);
    return result;
  }

  // A tiny checkpoint of `layers` layers in dir_/name.
  fs::path make_checkpoint(const std::string& name, int layers = 2, const std::string& naming = "hf") {
    const fs::path path = dir_ / name;
    const CliResult r = run("gen-checkpoint --preset tiny --layers " + std::to_string(layers) + " --out " +
                            quote(path.string()) + " --naming " + naming + " --seed 7");
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    return path;
  }

  fs::path dir_;
};

}  // namespace cli_test

// The exit code expected, and no sanitizer report: bad input is an error, never a crash.
#define EXPECT_CLEAN_ERROR(result, code)                                 \
  do {                                                                   \
    EXPECT_EQ((result).exit_code, code) << (result).out << (result).err; \
    EXPECT_FALSE(cli_test::sanitizer_report((result).err)) << (result).err; \
  } while (0)
