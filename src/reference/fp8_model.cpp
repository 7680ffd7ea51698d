// W4A8 numerics (fp8_model.hpp).
#include "reference/fp8_model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "mxmoe/error.hpp"
#include "mxmoe/formats.hpp"

namespace mxmoe::fp8 {

namespace {
constexpr float kE4m3Max = 448.f;
}  // namespace

int row_exponent(std::span<const uint8_t> row_scales) {
  int max_x = std::numeric_limits<int>::min();
  for (uint8_t s : row_scales)
    if (s != kE8m0Nan) max_x = std::max(max_x, static_cast<int>(s) - 127);
  return max_x == std::numeric_limits<int>::min() ? 0 : max_x - 6;
}

void e4m3_weight_row(std::span<double> row, int c) {
  for (double& v : row) {
    // v / 2^c is a power-of-two shift of an e2m1 x e8m0 value: exact in fp32 unless below fp32's range,
    // where e4m3 rounds it to zero anyway.
    const float shifted = static_cast<float>(std::ldexp(v, -c));
    v = std::ldexp(static_cast<double>(e4m3_to_float(float_to_e4m3(shifted))), c);
  }
}

float row_round_trip(std::span<float> x) {
  float amax = 0.f;
  for (float v : x) amax = std::isnan(v) ? v : std::max(amax, std::fabs(v));
  if (!std::isfinite(amax)) {
    for (float& v : x) v = std::numeric_limits<float>::quiet_NaN();
    return std::numeric_limits<float>::quiet_NaN();
  }
  if (amax == 0.f) return 0.f;
  const float scale = amax / kE4m3Max;
  for (float& v : x) v = e4m3_to_float(float_to_e4m3(v / scale)) * scale;
  return scale;
}

float gemm2_input_scale(float alpha, float limit) {
  if (!(alpha > 0.f) || !(limit > 0.f) || !std::isfinite(limit)) return 0.f;
  // gate x sigmoid(alpha gate) rises from its minimum, -0.2784645 / alpha (u sigmoid(u) at u = -1.2785),
  // to limit x sigmoid(alpha limit) at the clamp. No margin: a value a rounding above the bound
  // saturates to 448 / s, an error far below e4m3's step.
  const double glu = std::max(limit / (1 + std::exp(-static_cast<double>(alpha) * limit)), 0.27846454 / alpha);
  const double bound = glu * (static_cast<double>(limit) + 1);
  int e = std::ilogb(kE4m3Max / bound);
  while (bound * std::ldexp(1.0, e) > kE4m3Max) --e;
  return e >= -126 && e <= 126 ? std::ldexp(1.f, e) : 0.f;  // s and 1 / s normal floats
}

float require_gemm2_input_scale(float alpha, float limit, std::string_view who) {
  const float s = gemm2_input_scale(alpha, limit);
  MXMOE_REQUIRE(s > 0.f, who, " scales GEMM2's e4m3 input by the clamped SwiGLU's bound, which needs "
                "MoeConfig.swiglu_alpha > 0 and a swiglu_limit in float's normal range, got swiglu_alpha ",
                alpha, ", swiglu_limit ", limit);
  return s;
}

void static_round_trip(std::span<float> x, float s) {
  for (float& v : x) v = e4m3_to_float(float_to_e4m3(v * s)) / s;
}

}  // namespace mxmoe::fp8
