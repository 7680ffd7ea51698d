#pragma once
// The CPU reference MoE: the oracle for every test and the `reference` backend. fp64 accumulation,
// bf16 in and out, weights in the checkpoint's MXFP4 layout (FACTS.md §1).
#include <cstdint>
#include <span>

#include "mxmoe/config.hpp"
#include "mxmoe/formats.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe {

// Optional emulation of MXFP8 activation quantisation, as the block-scaled GPU paths do it.
struct ReferenceOptions {
  bool mxfp8_gemm1_input = false;  // quantise each token's hidden vector to MXFP8 before GEMM1
  bool mxfp8_gemm2_input = false;  // quantise each SwiGLU output row to MXFP8 before GEMM2
  ScaleRule scale_rule = ScaleRule::Rceil;
  // W4A8, Hopper's `fp8` precision (src/reference/fp8_model.hpp): each token's hidden vector to e4m3
  // with one fp32 scale, each SwiGLU output element to e4m3 at one static power-of-two scale (from the
  // clamp's bound: needs swiglu_alpha > 0), and the weights as e4m3 with a power-of-two offset per
  // output row (exact within 15 scale exponents of the row's largest).
  bool fp8_gemm1_input = false;
  bool fp8_gemm2_input = false;
  bool fp8_weights = false;
};

// Routing of T tokens: ids [T, k] (int32) and weights [T, k] (fp32), slot order = descending logit,
// ties to the lower expert id. logits is [T, E] fp32.
void reference_route(const MoeConfig& config, std::span<const float> logits, int64_t tokens,
                     std::span<int32_t> ids, std::span<float> weights);

// Router logits = hidden @ router_weight^T + router_bias (fp64 accumulate, rounded to fp32).
void reference_router_logits(const MoeConfig& config, std::span<const uint16_t> hidden, int64_t tokens,
                             std::span<const uint16_t> router_weight, std::span<const uint16_t> router_bias,
                             std::span<float> logits);

// The whole MoE block: out [T, H] bf16 from hidden [T, H] bf16 and logits [T, E] fp32.
void reference_moe(const MoeConfig& config, const MoeWeights& weights, std::span<const uint16_t> hidden,
                   std::span<const float> logits, int64_t tokens, std::span<uint16_t> out,
                   const ReferenceOptions& options = {});

// The same in fp64 output (before the final bf16 rounding), for error measurements.
void reference_moe_f64(const MoeConfig& config, const MoeWeights& weights, std::span<const uint16_t> hidden,
                       std::span<const float> logits, int64_t tokens, std::span<double> out,
                       const ReferenceOptions& options = {});

// Clamped interleaved SwiGLU of one (gate, linear) pair.
double swiglu(double gate, double linear, double alpha, double limit);

}  // namespace mxmoe
