#pragma once
// Expert-parallel ranks run the ordinary kernels (sharded_moe.hpp): every token keeps k distinct experts,
// those on other ranks replaced by `absent` experts appended to the rank's own, whose weights are all
// zero (codes 0, scale bytes 127 = 2^0, zero biases). Their outputs are exact zeros, and the pairs routed
// to them carry weight 0 (sharded_route.hpp), so they add nothing.
#include "mxmoe/config.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe::sharded {

// The rank's weights (shaped by `local`) with `absent` zero experts appended.
MoeLayerData pad_absent_experts(const MoeConfig& local, const MoeWeights& weights, int absent);

}  // namespace mxmoe::sharded
