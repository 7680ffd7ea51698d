// Per-row exponents of the FP8 wgmma tiles (fp8_row_exponents.hpp).
#include "layout/fp8_row_exponents.hpp"

#include <algorithm>
#include <span>

#include "mxmoe/error.hpp"
#include "reference/fp8_model.hpp"

namespace mxmoe::layout {

void fp8_row_exponents(const uint8_t* scales, int64_t experts, int64_t rows, int64_t kblocks, int8_t* out) {
  MXMOE_REQUIRE(experts >= 0 && rows >= 0 && kblocks > 0, "fp8_row_exponents: bad shape: experts ", experts,
                ", rows ", rows, ", kblocks ", kblocks);
  for (int64_t r = 0; r < experts * rows; ++r) {
    const int c = fp8::row_exponent(std::span<const uint8_t>(scales + r * kblocks, static_cast<size_t>(kblocks)));
    out[r] = static_cast<int8_t>(std::clamp(c, -128, 127));
  }
}

}  // namespace mxmoe::layout
