// The FP8 (W4A8) wgmma tiles (kernels/sm90/wgmma_fp8_gemm.hpp), GEMM1 and GEMM2 alone, each tile, against
// a CPU computation from fp8_model's functions in fp64: the weights as fp8::e4m3_weight_row sees them
// (random MXFP4 over a realistic scale span, some rows with blocks more than 15 exponents below their
// largest: the decode's subnormal path), GEMM1's activations as fp8::row_round_trip quantises them
// (quantize_tokens_e4m3), GEMM2's as GEMM1 writes them (e4m3 at the static scale, laid out on the host),
// then the epilogue (bias, clamped SwiGLU and GEMM1's e4m3 output; bias, routing weight). T = 0, 1, 3,
// 1000 and 4096 rows into one expert; experts without rows; K = 2880 and 4160 (K % 128 == 64) and 2944
// (== 0); N not a multiple of the block's 256 (192) weight rows; outputs poisoned.
//
// The bound. The products of e4m3 values are exact and the CPU sums them in fp64, so the kernel differs
// by its accumulation alone, then the bf16 output rounding (2^-9 of |ref|). Hopper's FP8 wgmma does not
// accumulate in full fp32: it keeps about 14 bits (DeepSeek-V3's report, section 3.3.2: a relative error
// near 2% at K = 4096 on random matrices), so each of the K / 32 steps may lose up to about 2^-13 of the
// running sum's magnitude, which for random signs stays within a few S / sqrt(K) (S: the sum over K of
// |a| |w|, scaled as the output): at most about 2^-11 S in all. Each output is held to
// |out - ref| <= 2^-8 |ref| + L 2^-9 S (L: the SwiGLU's slope bound, 10, in GEMM1; the routing weight in
// GEMM2), and the whole output's relative L2 error to 3e-2. GEMM1's e4m3 output adds its rounding, half
// an e4m3 step: 2^-4 of the value, or 2^-10 / s below e4m3's normal range (its L2 bound is 6e-2); and at
// least 90% of its codes must be the model's own (a value lands on the model's side of a rounding
// boundary unless the accumulation moved it across). A layout, order or scale bug moves outputs by
// O(|ref|) ~ S / sqrt(K) (S / 64 at these K), well past all of these. The test prints the measured worst
// ratio and L2 error: tighten both from a run (1e-5 S would hold only for a full-fp32 accumulation).
// Skips itself without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <numeric>
#include <thread>

#include "gpu/gpu_test_support.hpp"
#include "kernels/sm90/fp8_chunk_order.hpp"
#include "kernels/sm90/wgmma_fp8_gemm.hpp"
#include "layout/fp8_row_exponents.hpp"
#include "layout/gemv_layout.hpp"
#include "reference/fp8_model.hpp"

namespace mxmoe::test {
namespace {

constexpr double kEps = 1.0 / 512;
constexpr float kAlpha = 1.702f, kLimit = 7.f;
const float kGemm2Scale = fp8::gemm2_input_scale(kAlpha, kLimit);  // GEMM1's output scale, 8

struct Fp8Case {
  int64_t tokens;
  int k, n, experts, top_k;
  int used_experts;  // tokens pick among the first used_experts (the rest get no rows)
  bool every_width = false;  // instead: top_k 1, expert e takes kWidthCounts[e] rows (tokens, experts: theirs)
};

// Rows per expert that put an m-tile of each narrower wgmma path of every tile (and of the full width)
// at and past its boundary: 8 .. 64 in steps of 8, 96, 128, 144, 160 and 192, each also plus one.
constexpr int kWidthCounts[] = {1,  8,  9,  16, 17, 24,  25,  32,  33,  40,  41,  48,  49,  56,  57,
                                64, 65, 96, 97, 128, 129, 144, 145, 160, 161, 192, 193, 0};
constexpr int kWidthExperts = static_cast<int>(std::size(kWidthCounts));
constexpr int64_t width_tokens() {
  int64_t sum = 0;
  for (const int c : kWidthCounts) sum += c;
  return sum;
}

// One GEMM's random MXFP4 weights in checkpoint order, their exact values and the e4m3 view.
struct Weights {
  int experts, n, k;
  std::vector<uint8_t> blocks, scales;  // [E][N][K/32][16], [E][N][K/32]
  std::vector<uint16_t> bias;           // [E][N] bf16
  std::vector<double> w;                // [E][N][K]: e4m3_weight_row of the exact values
};

Weights random_weights(int experts, int n, int k, std::mt19937_64& rng) {
  Weights m{experts, n, k, {}, {}, {}, {}};
  const int kb = k / 32;
  m.blocks.resize(static_cast<size_t>(experts) * n * kb * 16);
  m.scales.resize(static_cast<size_t>(experts) * n * kb);
  m.bias.resize(static_cast<size_t>(experts) * n);
  for (auto& b : m.blocks) b = static_cast<uint8_t>(rng());
  for (int64_t r = 0; r < int64_t{experts} * n; ++r) {
    const int base = 116 + static_cast<int>(rng() % 10);  // checkpoint-like: 2^-11 .. 2^-2
    for (int b = 0; b < kb; ++b) {
      int s = base - static_cast<int>(rng() % 5);
      // Every 7th row: some blocks 16 to 23 exponents below (e4m3 subnormals or zero after the shift).
      if (r % 7 == 3 && rng() % 4 == 0) s = base - 16 - static_cast<int>(rng() % 8);
      m.scales[r * kb + b] = static_cast<uint8_t>(s);
    }
  }
  std::normal_distribution<float> normal(0.f, 0.5f);
  for (auto& b : m.bias) b = float_to_bf16(normal(rng));
  m.w.resize(static_cast<size_t>(experts) * n * k);
  for (int64_t r = 0; r < int64_t{experts} * n; ++r) {
    for (int kk = 0; kk < k; ++kk) {
      const uint8_t byte = m.blocks[(r * kb + kk / 32) * 16 + (kk % 32) / 2];
      const uint8_t code = kk % 2 ? byte >> 4 : byte & 0xF;
      m.w[r * k + kk] = std::ldexp(static_cast<double>(e2m1_to_float(code)), m.scales[r * kb + kk / 32] - 127);
    }
    const int c = fp8::row_exponent(std::span<const uint8_t>(m.scales.data() + r * kb, static_cast<size_t>(kb)));
    fp8::e4m3_weight_row(std::span<double>(m.w.data() + r * k, static_cast<size_t>(k)), c);
  }
  return m;
}

// The weights on the device: a W4A8 layer's records (gemv_layout.hpp) and their row exponents.
struct DeviceWeights {
  DeviceBuffer packed, exponents, bias;
  gemv::PackedShape shape;
};

DeviceWeights upload(const Weights& m, bool gemm1) {
  DeviceWeights d;
  d.shape = gemv::packed_shape(m.n, m.k / 32);
  std::vector<uint8_t> packed(static_cast<size_t>(d.shape.bytes() * m.experts));
  const size_t blocks_per_expert = static_cast<size_t>(m.n) * (m.k / 32);
  std::vector<int8_t> exponents(static_cast<size_t>(m.experts) * m.n);
  layout::fp8_row_exponents(m.scales.data(), m.experts, m.n, m.k / 32, exponents.data());
  for (int e = 0; e < m.experts; ++e)
    gemv::pack_expert(m.blocks.data() + e * blocks_per_expert * 16, m.scales.data() + e * blocks_per_expert, d.shape,
                      gemm1, packed.data() + e * d.shape.bytes(), exponents.data() + e * m.n);
  d.packed = to_device(packed);
  d.exponents = to_device(exponents);
  d.bias = to_device(m.bias);
  return d;
}

// A routing: each token's top_k distinct experts among the first `used`, sorted by expert (stable).
struct Routing {
  std::vector<int32_t> row_pair, expert_offsets, active;
  std::vector<float> pair_weights;
  int32_t active_count = 0;
};

// The routing of pairs whose experts are pair_expert (each pair's row in expert order, stable), with
// random routing weights.
Routing sorted_routing(const std::vector<int32_t>& pair_expert, int experts, std::mt19937_64& rng) {
  Routing r;
  r.expert_offsets.assign(static_cast<size_t>(experts) + 1, 0);
  for (const int32_t e : pair_expert) ++r.expert_offsets[e + 1];
  for (int e = 0; e < experts; ++e) r.expert_offsets[e + 1] += r.expert_offsets[e];
  r.row_pair.resize(pair_expert.size());
  std::vector<int32_t> fill(r.expert_offsets.begin(), r.expert_offsets.end() - 1);
  for (int32_t p = 0; p < static_cast<int32_t>(pair_expert.size()); ++p) r.row_pair[fill[pair_expert[p]]++] = p;
  for (int e = 0; e < experts; ++e)
    if (r.expert_offsets[e + 1] > r.expert_offsets[e]) r.active.push_back(e);
  r.active_count = static_cast<int32_t>(r.active.size());
  std::uniform_real_distribution<float> weight(0.05f, 1.f);
  r.pair_weights.resize(pair_expert.size());
  for (auto& w : r.pair_weights) w = weight(rng);
  return r;
}

Routing random_routing(int64_t tokens, int experts, int top_k, int used, std::mt19937_64& rng) {
  std::vector<int32_t> pair_expert(static_cast<size_t>(tokens * top_k));
  std::vector<int> pool(static_cast<size_t>(used));
  for (int64_t t = 0; t < tokens; ++t) {
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    for (int j = 0; j < top_k; ++j) pair_expert[t * top_k + j] = pool[j];
  }
  return sorted_routing(pair_expert, experts, rng);
}

// kWidthCounts's routing: top_k 1, expert e taking kWidthCounts[e] tokens, in shuffled token order.
Routing width_routing(std::mt19937_64& rng) {
  std::vector<int32_t> pair_expert;
  for (int e = 0; e < kWidthExperts; ++e) pair_expert.insert(pair_expert.end(), kWidthCounts[e], e);
  std::shuffle(pair_expert.begin(), pair_expert.end(), rng);
  return sorted_routing(pair_expert, kWidthExperts, rng);
}

int expert_of_row(const Routing& r, int64_t row) {
  return static_cast<int>(std::upper_bound(r.expert_offsets.begin(), r.expert_offsets.end(), row) -
                          r.expert_offsets.begin()) - 1;
}

// Random rows of k values, some 16x larger, some 256x smaller (e4m3 subnormals at GEMM2's scale), some of
// zeros, within the SwiGLU's bound.
std::vector<float> random_rows(int64_t rows, int k, std::mt19937_64& rng) {
  std::vector<float> x(static_cast<size_t>(rows * k));
  std::normal_distribution<float> normal(0.f, 1.f);
  const float bound = 448.f / kGemm2Scale;
  for (int64_t r = 0; r < rows; ++r) {
    const float gain = r % 5 == 1 ? 16.f : r % 7 == 4 ? 1.f / 256 : r % 11 == 2 ? 0.f : 1.f;
    for (int kk = 0; kk < k; ++kk) x[r * k + kk] = std::clamp(normal(rng) * gain, -bound, bound);
  }
  return x;
}

double swiglu(double gate, double linear) {
  gate = std::min(gate, static_cast<double>(kLimit));
  linear = std::clamp(linear, -static_cast<double>(kLimit), static_cast<double>(kLimit));
  return gate / (1 + std::exp(-kAlpha * gate)) * (linear + 1);
}

// f(row) for rows [0, rows) on every core.
template <class F>
void parallel_rows(int64_t rows, F&& f) {
  const int64_t threads = std::max<int64_t>(1, std::min<int64_t>(std::thread::hardware_concurrency(), rows));
  std::vector<std::thread> pool;
  for (int64_t i = 0; i < threads; ++i)
    pool.emplace_back([&, i] {
      for (int64_t r = i; r < rows; r += threads) f(r);
    });
  for (auto& t : pool) t.join();
}

struct Check {
  double worst_ratio = 0, num = 0, den = 0;  // max |out - ref| / bound; L2 sums
  int64_t bad = 0, first_bad = -1;
  void add(int64_t at, double out, double ref, double bound) {
    const double d = std::isfinite(out) ? std::abs(out - ref) : INFINITY;
    worst_ratio = std::max(worst_ratio, d / bound);
    if (!(d <= bound) && bad++ == 0) first_bad = at;
    if (std::isfinite(d)) {
      num += d * d;
      den += ref * ref;
    }
  }
  double rel_l2() const { return den > 0 ? std::sqrt(num / den) : std::sqrt(num); }
};

struct Fp8Param {
  int rows;  // the tile's
  Fp8Case c;
  int splits = 1;  // blocks sharing a tile set's K (split_k.cuh)
};

class GpuWgmmaFp8 : public ::testing::TestWithParam<Fp8Param> {};

template <bool kGemm1>
void run_case(const Fp8Param& param) {
  const Fp8Case c = param.c;
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const Weights m = random_weights(c.experts, c.n, c.k, rng);
  const DeviceWeights dw = upload(m, kGemm1);
  const Routing route =
      c.every_width ? width_routing(rng) : random_routing(c.tokens, c.experts, c.top_k, c.used_experts, rng);
  const int64_t rows = c.tokens * c.top_k;
  const int64_t k_pitch = sm90::padded_k(c.k);
  // GEMM1's input: bf16 tokens (quantised to their sorted rows on the device); GEMM2's: sorted rows of e4m3
  // at the static scale in the activation order (as GEMM1 writes them). x: their values as the model sees them.
  const int64_t in_rows = kGemm1 ? c.tokens : rows;
  std::vector<float> x = random_rows(in_rows, c.k, rng);
  std::vector<uint16_t> tokens(static_cast<size_t>(std::max<int64_t>(in_rows, 1) * c.k));
  std::vector<uint8_t> codes(static_cast<size_t>(std::max<int64_t>(in_rows, 1) * k_pitch), 0);
  for (int64_t r = 0; r < in_rows; ++r) {
    std::span<float> row(x.data() + r * c.k, static_cast<size_t>(c.k));
    if constexpr (kGemm1) {
      for (int kk = 0; kk < c.k; ++kk) tokens[r * c.k + kk] = float_to_bf16(row[kk]);
      for (int kk = 0; kk < c.k; ++kk) row[kk] = bf16_to_float(tokens[r * c.k + kk]);
      fp8::row_round_trip(row);  // as quantize_tokens_e4m3 will
    } else {
      for (int kk = 0; kk < c.k; ++kk)
        codes[r * k_pitch + sm90::fp8_row_position(kk)] = float_to_e4m3(row[kk] * kGemm2Scale);
      fp8::static_round_trip(row, kGemm2Scale);
    }
  }

  const DeviceBuffer d_input = kGemm1 ? to_device(tokens) : to_device(codes);
  const DeviceBuffer d_row_pair = to_device(route.row_pair.empty() ? std::vector<int32_t>{0} : route.row_pair);
  std::vector<int32_t> pair_row(static_cast<size_t>(std::max<int64_t>(c.tokens * c.top_k, 1)), -1);
  for (size_t r = 0; r < route.row_pair.size(); ++r) pair_row[route.row_pair[r]] = static_cast<int32_t>(r);
  const DeviceBuffer d_pair_row = to_device(pair_row);
  const DeviceBuffer d_offsets = to_device(route.expert_offsets);
  const DeviceBuffer d_active = to_device(route.active.empty() ? std::vector<int32_t>{0} : route.active);
  const DeviceBuffer d_count = to_device(std::vector<int32_t>{route.active_count});
  const DeviceBuffer d_weights = to_device(route.pair_weights.empty() ? std::vector<float>{0.f} : route.pair_weights);
  DeviceBuffer d_act(static_cast<size_t>(std::max<int64_t>(rows, 1) * k_pitch));
  DeviceBuffer d_scales(static_cast<size_t>(std::max<int64_t>(rows, 1)) * 4);
  // GEMM1: e4m3 bytes, rows padded to whole chunks; GEMM2: bf16 rows.
  const int64_t out_pitch = kGemm1 ? sm90::padded_k(c.n / 2) : int64_t{c.n} * 2;  // bytes
  DeviceBuffer d_out(static_cast<size_t>(std::max<int64_t>(rows, 1) * out_pitch));
  MXMOE_CUDA_CHECK(cudaMemset(d_out.get(), 0xFF, d_out.bytes()));  // NaN (bf16 and e4m3): every byte must be written

  if constexpr (kGemm1)
    sm90::quantize_tokens_e4m3(d_input.get<uint16_t>(), c.k, d_act.get<uint8_t>(), d_scales.get<float>(), in_rows, c.k,
                               d_pair_row.get<int32_t>(), c.top_k, nullptr);
  mma::MmaArgs a;
  a.weights = dw.packed.get<uint8_t>();
  a.expert_stride = dw.shape.bytes();
  a.bias = dw.bias.get<uint16_t>();
  a.n = c.n;
  a.k = static_cast<int>(k_pitch);
  a.chunks = static_cast<int>(dw.shape.chunks);
  a.tiles = static_cast<int>(dw.shape.tiles);
  a.experts = c.experts;
  a.row_pair = d_row_pair.get<int32_t>();
  a.top_k = c.top_k;
  a.expert_offsets = d_offsets.get<int32_t>();
  a.active_experts = d_active.get<int32_t>();
  a.active_count = d_count.get<int32_t>();
  a.pair_weights = d_weights.get<float>();
  a.alpha = kAlpha;
  a.limit = kLimit;
  a.act = reinterpret_cast<const uint16_t*>(kGemm1 ? d_act.get<uint8_t>() : d_input.get<uint8_t>());
  a.out = d_out.get();
  sm90::Fp8Operands fp8{dw.exponents.get<int8_t>(), kGemm1 ? d_scales.get<float>() : nullptr};
  if (kGemm1) fp8.out_scale = kGemm2Scale;
  else fp8.act_scale = 1.f / kGemm2Scale;
  const auto launch = [&] {
    sm90::launch_wgmma_fp8<kGemm1>(a, fp8, c.tokens, std::max(route.active_count, 1), param.rows, param.splits, nullptr);
    MXMOE_CUDA_CHECK(cudaDeviceSynchronize());
    return to_host<uint8_t>(d_out, static_cast<size_t>(rows * out_pitch));
  };
  const auto out = launch();
  // Split-K adds the ranks' partial sums in a fixed order: a second launch gives the same bits.
  if (param.splits > 1) {
    MXMOE_CUDA_CHECK(cudaMemset(d_out.get(), 0xFF, d_out.bytes()));
    EXPECT_EQ(launch(), out) << "split-K " << param.splits << ": two launches differ";
  }

  // The CPU side: each sorted row's quantised activations against every weight row.
  const int outputs = kGemm1 ? c.n / 2 : c.n;
  std::vector<double> ref(static_cast<size_t>(rows * outputs)), bound(ref.size());
  parallel_rows(rows, [&](int64_t r) {
    const float* xr = x.data() + (kGemm1 ? route.row_pair[r] / c.top_k : r) * c.k;
    const int e = expert_of_row(route, r);
    std::vector<double> y(static_cast<size_t>(c.n)), s(static_cast<size_t>(c.n));
    for (int n = 0; n < c.n; ++n) {
      const double* w = m.w.data() + (int64_t{e} * c.n + n) * c.k;
      double sum = 0, mag = 0;
      for (int kk = 0; kk < c.k; ++kk) {
        sum += static_cast<double>(xr[kk]) * w[kk];
        mag += std::abs(static_cast<double>(xr[kk]) * w[kk]);
      }
      y[n] = sum + bf16_to_float(m.bias[int64_t{e} * c.n + n]);
      s[n] = mag;
    }
    for (int o = 0; o < outputs; ++o) {
      double value, slack;
      if constexpr (kGemm1) {
        value = swiglu(y[2 * o], y[2 * o + 1]);
        // The accumulation's slack, then the e4m3 output's rounding (half a step: above).
        slack = (1 + 1.0 / 16) * 10 * kEps * (s[2 * o] + s[2 * o + 1]) + std::abs(value) / 16 +
                std::ldexp(1.0, -10) / kGemm2Scale;
      } else {
        const double weight = route.pair_weights[route.row_pair[r]];
        value = y[o] * weight;
        slack = weight * kEps * s[o];
      }
      ref[r * outputs + o] = value;
      bound[r * outputs + o] = std::ldexp(std::abs(value), -8) + slack + 1e-30;
    }
  });
  // The output's value at (row, output): GEMM1's e4m3 code at its position, GEMM2's bf16.
  const auto value_at = [&](int64_t r, int o) -> double {
    if constexpr (kGemm1) return e4m3_to_float(out[r * out_pitch + sm90::fp8_row_position(o)]) / kGemm2Scale;
    uint16_t v;
    std::memcpy(&v, &out[r * out_pitch + 2 * int64_t{o}], 2);
    return bf16_to_float(v);
  };
  Check check;
  int64_t same_codes = 0, nonzero_padding = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int o = 0; o < outputs; ++o) {
      check.add(r * outputs + o, value_at(r, o), ref[r * outputs + o], bound[r * outputs + o]);
      if (kGemm1) {
        const auto model = static_cast<float>(ref[r * outputs + o]);
        same_codes += out[r * out_pitch + sm90::fp8_row_position(o)] == float_to_e4m3(model * kGemm2Scale);
      }
    }
  if (kGemm1)  // the padding past N / 2, which GEMM2 multiplies with zero weights: zeros
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = outputs; o < out_pitch; ++o) nonzero_padding += out[r * out_pitch + sm90::fp8_row_position(o)] != 0;
  const double same = rows > 0 ? static_cast<double>(same_codes) / static_cast<double>(rows * outputs) : 1.0;
  std::printf("  %s, %d-row tile, split-K %d, T = %lld, K = %d, N = %d: relative L2 %.3g, worst |out - ref| / "
              "bound %.3g; e4m3 codes equal to the model's %.4f\n",
              kGemm1 ? "GEMM1" : "GEMM2", param.rows, param.splits, static_cast<long long>(c.tokens), c.k, c.n,
              check.rel_l2(), check.worst_ratio, kGemm1 ? same : 0.0);
  EXPECT_EQ(check.bad, 0) << "first at row " << check.first_bad / std::max(outputs, 1) << ", output "
                          << check.first_bad % std::max(outputs, 1) << ": "
                          << (check.first_bad < 0 ? 0.0 : value_at(check.first_bad / outputs, check.first_bad % outputs))
                          << " against " << (check.first_bad < 0 ? 0.0 : ref[check.first_bad]);
  EXPECT_LE(check.rel_l2(), kGemm1 ? 6e-2 : 3e-2);
  if (kGemm1) {
    EXPECT_GE(same, 0.9) << "e4m3 codes equal to the model's";
    EXPECT_EQ(nonzero_padding, 0) << "padding bytes past N / 2";
  }
  if (rows == 0) {  // nothing written
    const auto untouched = to_host<uint8_t>(d_out, 4);
    for (uint8_t v : untouched) EXPECT_EQ(v, 0xFFu);
  }
}

bool fp8_runs() {
  if (!sm90::wgmma_fp8_runs(0)) return false;
  sm90::configure_wgmma_fp8();
  return true;
}

TEST_P(GpuWgmmaFp8, Gemm1MatchesTheFp8Model) {
  MXMOE_SKIP_WITHOUT_GPU();
  if (!fp8_runs()) GTEST_SKIP() << "no sm_90a device or build for the fp8 wgmma tiles";
  run_case<true>(GetParam());
}

TEST_P(GpuWgmmaFp8, Gemm2MatchesTheFp8Model) {
  MXMOE_SKIP_WITHOUT_GPU();
  if (!fp8_runs()) GTEST_SKIP() << "no sm_90a device or build for the fp8 wgmma tiles";
  run_case<false>(GetParam());
}

std::vector<Fp8Param> params() {
  const Fp8Case cases[] = {
      {0, 2880, 400, 8, 4, 8},       // no rows
      {1, 2880, 400, 8, 4, 8},       // one token: 4 experts of 8 with one row each
      {3, 2944, 528, 8, 4, 6},       // K % 128 == 0; experts 6, 7 without rows
      {1000, 2880, 400, 32, 4, 24},  // many experts, a third without rows; N = 25 tiles: a part block
      {4096, 4160, 272, 4, 1, 1},    // every row into one expert; K % 128 == 64
      {width_tokens(), 2880, 400, kWidthExperts, 1, kWidthExperts, true},  // every wgmma width's m-tiles
  };
  std::vector<Fp8Param> out;
  for (const int rows : {32, 64, 128, 192})
    for (const Fp8Case& c : cases) out.push_back({rows, c});
  // Split-K (the 32-row tile's, planned at decode sizes): 3 ways (23 chunks as 7, 8, 8) and the most, 8 (2
  // or 3 chunks each), on the small and the odd cases and every path width.
  for (const int splits : {3, sm90::kMaxSplits})
    for (const Fp8Case& c : {cases[1], cases[2], cases[3], cases[5]}) out.push_back({sm90::kSplitRows, c, splits});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Tiles, GpuWgmmaFp8, ::testing::ValuesIn(params()), [](const auto& info) {
  const Fp8Param& p = info.param;
  return "fp8wgmma" + std::to_string(p.rows) + "_T" + std::to_string(p.c.tokens) + "_k" + std::to_string(p.c.k) +
         "_n" + std::to_string(p.c.n) + (p.c.every_width ? "_every_width" : "") +
         (p.splits > 1 ? "_split" + std::to_string(p.splits) : "");
});

TEST(GpuWgmmaFp8Errors, RejectsBadArguments) {
  MXMOE_SKIP_WITHOUT_GPU();
  mma::MmaArgs a;
  a.k = 2880;  // not whole chunks
  a.chunks = 23;
  const sm90::Fp8Operands none{};
  int8_t exponent = 0;
  float scale = 1.f;
  const sm90::Fp8Operands some{&exponent, &scale};
  expect_error_naming([&] { sm90::launch_wgmma_fp8<true>(a, some, 1, 1, 48, 1, nullptr); }, "rows must be");
  expect_error_naming([&] { sm90::launch_wgmma_fp8<true>(a, some, 1, 1, 64, 1, nullptr); }, "whole chunks");
  for (const int splits : {0, sm90::kMaxSplits + 1})
    expect_error_naming([&] { sm90::launch_wgmma_fp8<true>(a, some, 1, 1, 64, splits, nullptr); }, "splits must be");
  expect_error_naming([&] { sm90::launch_wgmma_fp8<true>(a, some, 1, 1, 128, 2, nullptr); }, "32-row tile only");
  a.k = 2944;
  expect_error_naming([&] { sm90::launch_wgmma_fp8<false>(a, none, 1, 1, 64, 1, nullptr); }, "row exponents");
  const sm90::Fp8Operands no_scale{&exponent, &scale};  // GEMM2 takes act_scale, not an array
  expect_error_naming([&] { sm90::launch_wgmma_fp8<false>(a, no_scale, 1, 1, 64, 1, nullptr); }, "activation scales");
  const sm90::Fp8Operands no_scales{&exponent};
  expect_error_naming([&] { sm90::launch_wgmma_fp8<true>(a, no_scales, 1, 1, 64, 1, nullptr); }, "activation scales");
  sm90::Fp8Operands odd_out = some;
  odd_out.out_scale = 6.f;  // GEMM1's output scale: a power of two
  expect_error_naming([&] { sm90::launch_wgmma_fp8<true>(a, odd_out, 1, 1, 64, 1, nullptr); }, "out_scale");
}

}  // namespace
}  // namespace mxmoe::test
