#pragma once
// Helpers shared by the CPU and GPU tests: fresh seeds, error-message checks, configs.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>

#include "mxmoe/config.hpp"
#include "mxmoe/error.hpp"
#include "mxmoe/runner.hpp"

namespace mxmoe::test {

// A fresh seed per run; MXMOE_TEST_SEED reproduces one. Tests print it through SCOPED_TRACE.
inline uint64_t fresh_seed() {
  if (const char* env = std::getenv("MXMOE_TEST_SEED")) return std::strtoull(env, nullptr, 0);
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) | rd();
}

// fn must throw mxmoe::Error whose message contains `word`.
template <class Fn>
void expect_error_naming(Fn&& fn, const std::string& word) {
  try {
    fn();
    ADD_FAILURE() << "no mxmoe::Error thrown (expected one naming '" << word << "')";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
  }
}

// A gpt-oss-semantics config of an explicit shape (not validated: tests also build invalid ones).
// A runner on the CPU reference, MXMOE_BACKEND ignored.
inline RunnerOptions reference_options(int64_t max_tokens) {
  RunnerOptions o;
  o.backend = Backend::Reference;
  o.max_tokens = max_tokens;
  o.use_env = false;
  return o;
}

inline MoeConfig make_config(int experts, int top_k, int hidden, int intermediate) {
  MoeConfig c;
  c.num_experts = experts;
  c.top_k = top_k;
  c.hidden = hidden;
  c.intermediate = intermediate;
  return c;
}

}  // namespace mxmoe::test
