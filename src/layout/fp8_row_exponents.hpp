#pragma once
// The FP8 (W4A8) wgmma tiles' per-row exponents (docs/fp8.md): each output row's weights are decoded as
// e4m3 of value / 2^c, and 2^c multiplies the row's output in the epilogue. Computed once at upload from
// the checkpoint's scales, on the host.
#include <cstdint>

namespace mxmoe::layout {

// scales [experts][rows][kblocks] (checkpoint order, e8m0 bytes) -> out [experts][rows]: c =
// fp8::row_exponent of each row (reference/fp8_model.hpp; NaN scales skipped, an all-NaN row 0), clamped
// to int8's -128. The clamp changes no value: a row whose c is below -128 has its largest scale byte below
// 5, so every one of its blocks is within 5 exponents of it and stays exact at d = x - c >= 1.
void fp8_row_exponents(const uint8_t* scales, int64_t experts, int64_t rows, int64_t kblocks, int8_t* out);

}  // namespace mxmoe::layout
