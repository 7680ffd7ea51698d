// MoeWeights shape checks and MoeLayerData (owning storage, random checkpoint-like layers).
#include "mxmoe/weights.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>

#include "mxmoe/error.hpp"
#include "mxmoe/formats.hpp"
#include "common/parallel_for.hpp"

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

// The codes and scales come from a counter-based generator: draw i of a stream is SplitMix64's i-th
// output from the stream's key, a pure function of (key, i). So a layer's 1.7 GB (gpt-oss-120b) are
// made on every core (one mt19937_64 took about 6 s), the same bytes on any host and thread count.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;
uint64_t draw(uint64_t key, uint64_t i) { return mix64(key + (i + 1) * kGamma); }
// Each tensor its own stream.
uint64_t stream_key(uint64_t seed, uint64_t tensor) { return mix64(seed * kGamma + mix64(tensor + 1)); }

constexpr size_t kFillChunk = size_t{1} << 20;  // bytes per parallel item

// f(begin, end) over [0, n) in chunks of kFillChunk on every core.
template <class F>
void for_chunks(size_t n, F&& f) {
  parallel_for(static_cast<int64_t>((n + kFillChunk - 1) / kFillChunk), [&](int64_t c) {
    const size_t begin = static_cast<size_t>(c) * kFillChunk;
    f(begin, std::min(n, begin + kFillChunk));
  });
}

// Eight bytes per draw, low byte first (the same bytes on any host).
void fill_bytes(uint64_t key, std::vector<uint8_t>& bytes) {
  for_chunks(bytes.size(), [&](size_t begin, size_t end) {  // kFillChunk is a multiple of 8
    for (size_t i = begin; i < end; i += 8) {
      const uint64_t bits = draw(key, i / 8);
      for (size_t b = 0; b < 8 && i + b < end; ++b) bytes[i + b] = static_cast<uint8_t>(bits >> (8 * b));
    }
  });
}

// Scale bytes for blocks of K-dimension `k`: the e2m1 values have std ~2.93 (sqrt(68.5/8)), so a
// 2^-2 base factor and a +-1 spread of exponents give a dequantised std of ~1/sqrt(K).
void fill_scales(uint64_t key, std::vector<uint8_t>& scales, int k) {
  const int base = 127 - static_cast<int>(std::lround(std::log2(std::sqrt(static_cast<double>(k))))) - 2;
  for_chunks(scales.size(), [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i)
      scales[i] = static_cast<uint8_t>(base + static_cast<int>((draw(key, i) >> 32) % 3) - 1);
  });
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
  MoeLayerData data;
  data.w1_blocks.resize(static_cast<size_t>(sizes.w1_blocks));
  fill_bytes(stream_key(seed, 0), data.w1_blocks);
  data.w1_scales.resize(static_cast<size_t>(sizes.w1_scales));
  fill_scales(stream_key(seed, 1), data.w1_scales, config.hidden);
  data.w2_blocks.resize(static_cast<size_t>(sizes.w2_blocks));
  fill_bytes(stream_key(seed, 2), data.w2_blocks);
  data.w2_scales.resize(static_cast<size_t>(sizes.w2_scales));
  fill_scales(stream_key(seed, 3), data.w2_scales, config.intermediate);

  // The biases and the router (a few MB at most) from one sequential generator.
  std::mt19937_64 rng(stream_key(seed, 4));

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
