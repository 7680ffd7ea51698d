#pragma once
// The CPU reference routed by the engine's own routing (MoeRunner::forward_routed on the reference
// backend, and the oracle of the GPU tests of forward_routed): ids [T, k] and weights [T, k] taken as
// given, no softmax and no renormalisation. reference_moe is this after reference_route.
#include <cstdint>
#include <span>
#include <vector>

#include "mxmoe/config.hpp"
#include "mxmoe/reference.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe {

// Throws an Error naming topk_ids (a wrong element count, an id outside [0, E) other than -1, an expert
// named twice by one token) or topk_weights (a wrong element count, a weight that is negative or not
// finite, except a dropped pair's: id -1 drops its pair, which adds nothing).
void check_routed_input(const MoeConfig& config, std::span<const int32_t> ids, std::span<const float> weights,
                        int64_t tokens);
// int64 ids [T, k] (Python's default integer) as int32, each in [0, E) or -1, or an Error naming topk_ids.
std::vector<int32_t> narrow_routed_ids(std::span<const int64_t> ids, int top_k, int experts);

// out [T, H] in fp64 (before the final bf16 rounding) and in bf16; the inputs are checked
// (check_routed_input) first.
void reference_moe_routed_f64(const MoeConfig& config, const MoeWeights& weights, std::span<const uint16_t> hidden,
                              std::span<const int32_t> ids, std::span<const float> route_weights, int64_t tokens,
                              std::span<double> out, const ReferenceOptions& options = {});
void reference_moe_routed(const MoeConfig& config, const MoeWeights& weights, std::span<const uint16_t> hidden,
                          std::span<const int32_t> ids, std::span<const float> route_weights, int64_t tokens,
                          std::span<uint16_t> out, const ReferenceOptions& options = {});

}  // namespace mxmoe
