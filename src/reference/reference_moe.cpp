// The CPU reference MoE block (FACTS.md §1): route, GEMM1 + bias, clamped interleaved SwiGLU,
// GEMM2 + bias, weighted combine. Weights dequantise exactly; all arithmetic is fp64.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "mxmoe/error.hpp"
#include "mxmoe/formats.hpp"
#include "mxmoe/reference.hpp"
#include "reference/fp8_model.hpp"
#include "reference/routed_reference.hpp"

namespace mxmoe {
namespace {

// Pairs (token, slot) of one expert are processed this many at a time: each chunk dequantises the
// expert's weights once, and the per-chunk buffers stay small for large T.
constexpr size_t kPairChunk = 64;

void require_span(const char* function, const char* name, size_t actual, int64_t expected, const char* shape) {
  MXMOE_REQUIRE(static_cast<int64_t>(actual) == expected, function, ": ", name, " has ", actual,
                " elements, expected ", expected, " (", shape, ")");
}

// One expert's MXFP4 matrix [rows, cols] in the checkpoint layout.
struct Mxfp4Matrix {
  const uint8_t* blocks;  // [rows, cols/32, 16]
  const uint8_t* scales;  // [rows, cols/32]
  int64_t cols;

  // Row r as the GEMM sees it: exact doubles, e2m1 value * 2^(scale-127) (a 0xFF scale gives NaN), or
  // with `e4m3`, those values through e4m3 with the row's offset (W4A8, fp8_model.hpp).
  void row(int64_t r, const std::array<double, 16>& e2m1, bool e4m3, double* out) const {
    dequantize_row(r, e2m1, out);
    if (!e4m3) return;
    const int64_t nblocks = cols / kMxBlock;
    fp8::e4m3_weight_row(std::span(out, static_cast<size_t>(cols)),
                         fp8::row_exponent(std::span(scales + r * nblocks, static_cast<size_t>(nblocks))));
  }

  // Row r as exact doubles: e2m1 value * 2^(scale-127); a 0xFF scale gives NaN.
  void dequantize_row(int64_t r, const std::array<double, 16>& e2m1, double* out) const {
    const int64_t nblocks = cols / kMxBlock;
    const uint8_t* row_blocks = blocks + r * nblocks * (kMxBlock / 2);
    const uint8_t* row_scales = scales + r * nblocks;
    for (int64_t b = 0; b < nblocks; ++b) {
      const double scale = e8m0_to_float(row_scales[b]);
      const uint8_t* bytes = row_blocks + b * (kMxBlock / 2);
      double* dst = out + b * kMxBlock;
      for (int j = 0; j < kMxBlock / 2; ++j) {
        dst[2 * j] = e2m1[bytes[j] & 0xF] * scale;
        dst[2 * j + 1] = e2m1[bytes[j] >> 4] * scale;
      }
    }
  }
};

std::array<double, 16> e2m1_table() {
  std::array<double, 16> table{};
  for (int c = 0; c < 16; ++c) table[static_cast<size_t>(c)] = e2m1_to_float(static_cast<uint8_t>(c));
  return table;
}

// Four partial sums: breaks the add latency chain (all fp64, so the order is invisible at bf16).
double dot(const double* a, const double* b, int64_t n) {
  double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

// Quantise a row to MXFP8 and back, as the block-scaled GPU paths see it.
void mxfp8_round_trip(std::span<float> row, ScaleRule rule) {
  std::vector<uint8_t> codes(row.size());
  std::vector<uint8_t> scales(row.size() / kMxBlock);
  mxfp8_quantize(row, rule, codes, scales);
  mxfp8_dequantize(codes, scales, row);
}

// double -> bf16, correctly rounded: round to odd into fp32 first, so that fp32 -> bf16 (RNE)
// cannot round twice.
uint16_t double_to_bf16(double x) {
  float f = static_cast<float>(x);
  if (!std::isnan(x) && static_cast<double>(f) != x) {
    if (std::fabs(static_cast<double>(f)) > std::fabs(x)) f = std::nextafter(f, 0.0f);  // truncate
    f = std::bit_cast<float>(std::bit_cast<uint32_t>(f) | 1u);                          // sticky bit
  }
  return float_to_bf16(f);
}

}  // namespace

double swiglu(double gate, double linear, double alpha, double limit) {
  // std::min/std::clamp return the NaN argument when gate or linear is NaN: NaN propagates.
  gate = std::min(gate, limit);
  linear = std::clamp(linear, -limit, limit);
  const double sigmoid = 1.0 / (1.0 + std::exp(-alpha * gate));
  return gate * sigmoid * (linear + 1.0);
}

void reference_moe_f64(const MoeConfig& config, const MoeWeights& weights, std::span<const uint16_t> hidden,
                       std::span<const float> logits, int64_t tokens, std::span<double> out,
                       const ReferenceOptions& options) {
  config.validate();
  MXMOE_REQUIRE(tokens >= 0, "reference_moe: tokens = ", tokens, ", expected >= 0");
  require_span("reference_moe", "logits", logits.size(), tokens * config.num_experts, "[T, E]");
  std::vector<int32_t> ids(static_cast<size_t>(tokens * config.top_k));
  std::vector<float> route_weights(ids.size());
  reference_route(config, logits, tokens, ids, route_weights);
  reference_moe_routed_f64(config, weights, hidden, ids, route_weights, tokens, out, options);
}

void reference_moe_routed_f64(const MoeConfig& config, const MoeWeights& weights, std::span<const uint16_t> hidden,
                              std::span<const int32_t> ids, std::span<const float> route_weights, int64_t tokens,
                              std::span<double> out, const ReferenceOptions& options) {
  weights.validate(config);  // validates config too
  MXMOE_REQUIRE(tokens >= 0, "reference_moe: tokens = ", tokens, ", expected >= 0");
  const int64_t experts = config.num_experts;
  const int64_t k = config.top_k;
  const int64_t h = config.hidden;
  const int64_t inter = config.intermediate;
  require_span("reference_moe", "hidden", hidden.size(), tokens * h, "[T, H]");
  require_span("reference_moe", "out", out.size(), tokens * h, "[T, H]");
  check_routed_input(config, ids, route_weights, tokens);

  const float gemm2_scale =
      options.fp8_gemm2_input
          ? fp8::require_gemm2_input_scale(config.swiglu_alpha, config.swiglu_limit, "reference_moe: fp8_gemm2_input")
          : 0.f;

  // Activations as GEMM1 sees them: bf16, or bf16 -> MXFP8 -> back.
  std::vector<double> x(static_cast<size_t>(tokens * h));
  std::vector<float> row_f(static_cast<size_t>(std::max(h, inter)));
  for (int64_t t = 0; t < tokens; ++t) {
    std::span<float> row(row_f.data(), static_cast<size_t>(h));
    for (int64_t j = 0; j < h; ++j) row[static_cast<size_t>(j)] = bf16_to_float(hidden[static_cast<size_t>(t * h + j)]);
    if (options.mxfp8_gemm1_input) mxfp8_round_trip(row, options.scale_rule);
    if (options.fp8_gemm1_input) fp8::row_round_trip(row);
    std::copy(row.begin(), row.end(), x.begin() + t * h);
  }

  // (token, slot) pairs grouped by expert, in token order; dropped pairs (-1) add nothing.
  std::vector<std::vector<int64_t>> pairs(static_cast<size_t>(experts));
  for (int64_t p = 0; p < tokens * k; ++p)
    if (const int32_t e = ids[static_cast<size_t>(p)]; e != kDroppedPairId) pairs[static_cast<size_t>(e)].push_back(p);

  std::fill(out.begin(), out.end(), 0.0);
  const auto e2m1 = e2m1_table();
  const double alpha = config.swiglu_alpha;
  const double limit = config.swiglu_limit;
  const int64_t w1_rows = 2 * inter;
  std::vector<double> w_row(static_cast<size_t>(std::max(h, inter)));
  std::vector<double> h1(kPairChunk * static_cast<size_t>(w1_rows));  // GEMM1 outputs of a chunk
  std::vector<double> act(kPairChunk * static_cast<size_t>(inter));   // SwiGLU outputs of a chunk

  for (int64_t e = 0; e < experts; ++e) {
    const auto& expert_pairs = pairs[static_cast<size_t>(e)];
    const Mxfp4Matrix w1{weights.w1_blocks.data() + e * w1_rows * (h / 2),
                         weights.w1_scales.data() + e * w1_rows * (h / kMxBlock), h};
    const Mxfp4Matrix w2{weights.w2_blocks.data() + e * h * (inter / 2),
                         weights.w2_scales.data() + e * h * (inter / kMxBlock), inter};
    const uint16_t* b1 = weights.w1_bias.empty() ? nullptr : weights.w1_bias.data() + e * w1_rows;
    const uint16_t* b2 = weights.w2_bias.empty() ? nullptr : weights.w2_bias.data() + e * h;

    for (size_t begin = 0; begin < expert_pairs.size(); begin += kPairChunk) {
      const size_t n = std::min(kPairChunk, expert_pairs.size() - begin);
      const int64_t* chunk = expert_pairs.data() + begin;

      // GEMM1 + bias: h1[p, r] = W1[e][r, :] . x[token(p)] + b1[e][r].
      for (int64_t r = 0; r < w1_rows; ++r) {
        w1.row(r, e2m1, options.fp8_weights, w_row.data());
        const double bias = b1 ? bf16_to_float(b1[r]) : 0.0;
        for (size_t p = 0; p < n; ++p)
          h1[p * static_cast<size_t>(w1_rows) + static_cast<size_t>(r)] =
              dot(w_row.data(), x.data() + (chunk[p] / k) * h, h) + bias;
      }
      // Interleaved SwiGLU: gate at even rows, linear at odd rows.
      for (size_t p = 0; p < n; ++p) {
        const double* hp = h1.data() + p * static_cast<size_t>(w1_rows);
        double* ap = act.data() + p * static_cast<size_t>(inter);
        for (int64_t j = 0; j < inter; ++j) ap[j] = swiglu(hp[2 * j], hp[2 * j + 1], alpha, limit);
        if (options.mxfp8_gemm2_input || options.fp8_gemm2_input) {
          // The GPU holds the SwiGLU output in fp32 before quantising it: MXFP8, or e4m3 at the static
          // scale of the SwiGLU's bound.
          std::span<float> row(row_f.data(), static_cast<size_t>(inter));
          for (int64_t j = 0; j < inter; ++j) row[static_cast<size_t>(j)] = static_cast<float>(ap[j]);
          if (options.mxfp8_gemm2_input) mxfp8_round_trip(row, options.scale_rule);
          if (options.fp8_gemm2_input) fp8::static_round_trip(row, gemm2_scale);
          for (int64_t j = 0; j < inter; ++j) ap[j] = row[static_cast<size_t>(j)];
        }
      }
      // GEMM2 + bias, weighted into the token's output (the bias is inside the weighted sum).
      for (int64_t r = 0; r < h; ++r) {
        w2.row(r, e2m1, options.fp8_weights, w_row.data());
        const double bias = b2 ? bf16_to_float(b2[r]) : 0.0;
        for (size_t p = 0; p < n; ++p) {
          const double y = dot(w_row.data(), act.data() + p * static_cast<size_t>(inter), inter) + bias;
          const int64_t token = chunk[p] / k;
          out[static_cast<size_t>(token * h + r)] += static_cast<double>(route_weights[static_cast<size_t>(chunk[p])]) * y;
        }
      }
    }
  }
}

void reference_moe_routed(const MoeConfig& config, const MoeWeights& weights, std::span<const uint16_t> hidden,
                          std::span<const int32_t> ids, std::span<const float> route_weights, int64_t tokens,
                          std::span<uint16_t> out, const ReferenceOptions& options) {
  weights.validate(config);
  MXMOE_REQUIRE(tokens >= 0, "reference_moe: tokens = ", tokens, ", expected >= 0");
  require_span("reference_moe", "out", out.size(), tokens * config.hidden, "[T, H]");
  std::vector<double> out_f64(out.size());
  reference_moe_routed_f64(config, weights, hidden, ids, route_weights, tokens, out_f64, options);
  for (size_t i = 0; i < out.size(); ++i) out[i] = double_to_bf16(out_f64[i]);
}

void reference_moe(const MoeConfig& config, const MoeWeights& weights, std::span<const uint16_t> hidden,
                   std::span<const float> logits, int64_t tokens, std::span<uint16_t> out,
                   const ReferenceOptions& options) {
  weights.validate(config);
  MXMOE_REQUIRE(tokens >= 0, "reference_moe: tokens = ", tokens, ", expected >= 0");
  require_span("reference_moe", "out", out.size(), tokens * config.hidden, "[T, H]");
  std::vector<double> out_f64(out.size());
  reference_moe_f64(config, weights, hidden, logits, tokens, out_f64, options);
  for (size_t i = 0; i < out.size(); ++i) out[i] = double_to_bf16(out_f64[i]);
}

}  // namespace mxmoe
