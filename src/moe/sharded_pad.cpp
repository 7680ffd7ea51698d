// The zero experts of expert-parallel routing (sharded_pad.hpp).
#include "moe/sharded_pad.hpp"

#include <cstdint>
#include <span>
#include <vector>

#include "mxmoe/formats.hpp"

namespace mxmoe::sharded {
namespace {

template <class T>
std::vector<T> padded(std::span<const T> span, size_t per_expert, size_t absent, T fill) {
  std::vector<T> v(span.begin(), span.end());
  if (!span.empty()) v.resize(v.size() + absent * per_expert, fill);  // an empty bias stays none
  return v;
}

}  // namespace

MoeLayerData pad_absent_experts(const MoeConfig& local, const MoeWeights& w, int absent) {
  const size_t I = local.intermediate, H = local.hidden, n = static_cast<size_t>(absent);
  MoeLayerData d;
  d.w1_blocks = padded<uint8_t>(w.w1_blocks, 2 * I * H / 2, n, 0);
  d.w1_scales = padded<uint8_t>(w.w1_scales, 2 * I * H / kMxBlock, n, 127);
  d.w1_bias = padded<uint16_t>(w.w1_bias, 2 * I, n, 0);
  d.w2_blocks = padded<uint8_t>(w.w2_blocks, H * I / 2, n, 0);
  d.w2_scales = padded<uint8_t>(w.w2_scales, H * I / kMxBlock, n, 127);
  d.w2_bias = padded<uint16_t>(w.w2_bias, H, n, 0);
  return d;
}

}  // namespace mxmoe::sharded
