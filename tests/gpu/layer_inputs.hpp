#pragma once
// A GPU test's layer and inputs from one seed, and a forward checked against the fp64 reference
// (test_gpu_moe.cpp, test_gpu_resident.cpp).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gpu/gpu_test_support.hpp"

namespace mxmoe::test {

// One test shape: a fresh random layer, its inputs (the hidden rows, then the logits, from one rng of
// the seed), optionally every token routed to one expert and some scale bytes lifted.
struct InputCase {
  int experts, top_k, hidden, intermediate;
  int64_t tokens;
  bool one_expert, wide_scales;
};

// A case's layer and inputs, and their fp64 reference output.
struct LayerInputs {
  MoeConfig cfg;
  MoeLayerData layer;
  std::vector<uint16_t> hidden;
  std::vector<float> logits;
  std::vector<double> reference() const {
    std::vector<double> ref(hidden.size());
    reference_moe_f64(cfg, layer.view(), hidden, logits, static_cast<int64_t>(logits.size()) / cfg.num_experts, ref);
    return ref;
  }
};
inline LayerInputs make_inputs(const InputCase& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  LayerInputs in{mxmoe::test::make_config(c.experts, c.top_k, c.hidden, c.intermediate), {}, {}, {}};
  in.layer = MoeLayerData::random(in.cfg, seed);
  if (c.wide_scales) lift_some_scales(in.layer);
  in.hidden = random_hidden(c.tokens, in.cfg.hidden, rng);
  in.logits = random_logits(c.tokens, in.cfg.num_experts, rng);
  if (c.one_expert) route_every_token_to_one_expert(in.logits, c.tokens, in.cfg.num_experts);
  return in;
}
// Runs `runner` on the case's inputs and checks the output against the fp64 reference: every element
// written and finite, relative error at most 1e-2. Returns the output for further checks.
inline std::vector<uint16_t> run_checked(const MoeRunner& runner, const LayerInputs& in, int64_t tokens) {
  const auto out = run_on_gpu(runner, in.hidden, in.logits, tokens);
  const ErrorStats e = compare(out, in.reference());
  EXPECT_EQ(e.nan_count, 0) << "unwritten or non-finite outputs";
  EXPECT_LE(e.rel, 1e-2) << "worst element " << e.worst;
  return out;
}
inline std::string describe(const InputCase& c, uint64_t seed) {
  return "seed " + std::to_string(seed) + ", T = " + std::to_string(c.tokens) + ", H = " + std::to_string(c.hidden) +
         ", I = " + std::to_string(c.intermediate);
}

}  // namespace mxmoe::test
