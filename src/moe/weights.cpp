// MoeWeights shape checks and MoeLayerData (owning storage, random checkpoint-like layers).
#include "mxmoe/weights.hpp"

#include <cmath>
#include <cstdint>
#include <random>

#include "mxmoe/error.hpp"
#include "mxmoe/formats.hpp"

namespace mxmoe {
namespace {

struct TensorSizes {
  int64_t w1_blocks, w1_scales, w1_bias, w2_blocks, w2_scales, w2_bias;
};

// Element counts of the shapes in weights.hpp.
TensorSizes tensor_sizes(const MoeConfig& config) {
  const int64_t e = config.num_experts;
  const int64_t h = config.hidden;
  const int64_t i = config.intermediate;
  return {e * 2 * i * (h / kMxBlock) * 16, e * 2 * i * (h / kMxBlock), e * 2 * i,
          e * h * (i / kMxBlock) * 16,     e * h * (i / kMxBlock),     e * h};
}

void require_size(const char* tensor, const char* shape, size_t actual, int64_t expected, bool optional) {
  if (optional && actual == 0) return;
  MXMOE_REQUIRE(static_cast<int64_t>(actual) == expected, "MoeWeights.", tensor, ": expected ", expected,
                " elements (", shape, optional ? ", or 0 for no bias" : "", "), got ", actual);
}

// Scale byte for a block of K-dimension `k`: the e2m1 values have std ~2.93 (sqrt(68.5/8)), so a
// 2^-2 base factor and a +-1 spread of exponents give a dequantised std of ~1/sqrt(K).
uint8_t random_scale(std::mt19937_64& rng, int k) {
  const int base = 127 - static_cast<int>(std::lround(std::log2(std::sqrt(static_cast<double>(k))))) - 2;
  return static_cast<uint8_t>(base + std::uniform_int_distribution<int>(-1, 1)(rng));
}

void fill_bytes(std::mt19937_64& rng, std::vector<uint8_t>& bytes) {
  // Eight bytes per draw, low byte first (the same bytes on any host): a 20b layer has ~400 MB of codes.
  const size_t full = bytes.size() / 8 * 8;
  for (size_t i = 0; i < full; i += 8) {
    const uint64_t bits = rng();
    for (size_t b = 0; b < 8; ++b) bytes[i + b] = static_cast<uint8_t>(bits >> (8 * b));
  }
  if (full < bytes.size()) {
    const uint64_t bits = rng();
    for (size_t b = 0; full + b < bytes.size(); ++b) bytes[full + b] = static_cast<uint8_t>(bits >> (8 * b));
  }
}

void fill_bf16(std::mt19937_64& rng, std::vector<uint16_t>& values, size_t count, double stddev) {
  std::normal_distribution<double> dist(0.0, stddev);
  values.resize(count);
  for (auto& v : values) v = float_to_bf16(static_cast<float>(dist(rng)));
}

}  // namespace

void MoeWeights::validate(const MoeConfig& config) const {
  config.validate();
  const TensorSizes want = tensor_sizes(config);
  require_size("w1_blocks", "[E, 2I, H/32, 16]", w1_blocks.size(), want.w1_blocks, false);
  require_size("w1_scales", "[E, 2I, H/32]", w1_scales.size(), want.w1_scales, false);
  require_size("w1_bias", "[E, 2I]", w1_bias.size(), want.w1_bias, true);
  require_size("w2_blocks", "[E, H, I/32, 16]", w2_blocks.size(), want.w2_blocks, false);
  require_size("w2_scales", "[E, H, I/32]", w2_scales.size(), want.w2_scales, false);
  require_size("w2_bias", "[E, H]", w2_bias.size(), want.w2_bias, true);
}

MoeWeights MoeLayerData::view() const {
  return MoeWeights{w1_blocks, w1_scales, w1_bias, w2_blocks, w2_scales, w2_bias};
}

MoeLayerData MoeLayerData::random(const MoeConfig& config, uint64_t seed, bool with_bias) {
  config.validate();
  const TensorSizes sizes = tensor_sizes(config);
  std::mt19937_64 rng(seed);
  MoeLayerData data;

  data.w1_blocks.resize(static_cast<size_t>(sizes.w1_blocks));
  fill_bytes(rng, data.w1_blocks);
  data.w1_scales.resize(static_cast<size_t>(sizes.w1_scales));
  for (auto& s : data.w1_scales) s = random_scale(rng, config.hidden);
  data.w2_blocks.resize(static_cast<size_t>(sizes.w2_blocks));
  fill_bytes(rng, data.w2_blocks);
  data.w2_scales.resize(static_cast<size_t>(sizes.w2_scales));
  for (auto& s : data.w2_scales) s = random_scale(rng, config.intermediate);

  if (with_bias) {
    fill_bf16(rng, data.w1_bias, static_cast<size_t>(sizes.w1_bias), 0.1);
    fill_bf16(rng, data.w2_bias, static_cast<size_t>(sizes.w2_bias), 0.1);
  }
  const size_t experts = static_cast<size_t>(config.num_experts);
  fill_bf16(rng, data.router_weight, experts * static_cast<size_t>(config.hidden),
            1.0 / std::sqrt(static_cast<double>(config.hidden)));
  fill_bf16(rng, data.router_bias, experts, 0.1);
  return data;
}

}  // namespace mxmoe
