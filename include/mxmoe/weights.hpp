#pragma once
// One layer's expert weights in the gpt-oss checkpoint layout (FACTS.md §2), on the host.
#include <cstdint>
#include <span>
#include <vector>

#include "mxmoe/config.hpp"

namespace mxmoe {

// Non-owning host view. Weights are [out, in]; 32-element MXFP4 blocks run along `in`.
//   w1_blocks [E, 2I, H/32, 16] u8   w1_scales [E, 2I, H/32] e8m0   w1_bias [E, 2I] bf16 (optional)
//   w2_blocks [E, H,  I/32, 16] u8   w2_scales [E, H,  I/32] e8m0   w2_bias [E, H]  bf16 (optional)
// GEMM1 rows interleave gate (even) and linear (odd) outputs.
struct MoeWeights {
  std::span<const uint8_t> w1_blocks, w1_scales;
  std::span<const uint16_t> w1_bias;  // empty: no bias
  std::span<const uint8_t> w2_blocks, w2_scales;
  std::span<const uint16_t> w2_bias;  // empty: no bias

  // Throws mxmoe::Error naming the first tensor whose size does not match `config`.
  void validate(const MoeConfig& config) const;
};

// Owning storage for one layer (and its router), e.g. from a checkpoint or made at random.
struct MoeLayerData {
  std::vector<uint8_t> w1_blocks, w1_scales, w2_blocks, w2_scales;
  std::vector<uint16_t> w1_bias, w2_bias;
  std::vector<uint16_t> router_weight;  // [E, H] bf16 (may be empty)
  std::vector<uint16_t> router_bias;    // [E] bf16 (may be empty)

  MoeWeights view() const;

  // Random weights shaped like a real checkpoint: e2m1 codes uniform, scale exponents spread so the
  // dequantised weights have std ~ 1/sqrt(K) (checkpoint-like), small random biases, a router.
  static MoeLayerData random(const MoeConfig& config, uint64_t seed, bool with_bias = true);
};

}  // namespace mxmoe
