// The 128x4 swizzled block-scale layout (FACTS.md §4). The offset function lives in the header
// (constexpr, host/device); this file moves whole matrices and sizes grouped buffers.
#include <algorithm>
#include <cstdint>

#include "mxmoe/error.hpp"
#include "mxmoe/scale_layout.hpp"

namespace mxmoe {
namespace {

// Bounds that keep rows * kblocks and the padded products far from int64 overflow.
constexpr int64_t kMaxDim = int64_t{1} << 31;

void check_dims(int64_t rows, int64_t kblocks, const char* fn) {
  MXMOE_REQUIRE(rows >= 0 && rows < kMaxDim, fn, ": rows must be in [0, 2^31), got ", rows);
  MXMOE_REQUIRE(kblocks >= 0 && kblocks < kMaxDim, fn, ": kblocks must be in [0, 2^31), got ", kblocks);
}

}  // namespace

void swizzle_scales(std::span<const uint8_t> plain, int64_t rows, int64_t kblocks, std::span<uint8_t> dst) {
  check_dims(rows, kblocks, "swizzle_scales");
  MXMOE_REQUIRE(static_cast<int64_t>(plain.size()) == rows * kblocks, "swizzle_scales: plain.size() must be rows*kblocks = ",
                rows * kblocks, ", got ", plain.size());
  const int64_t bytes = swizzled_scale_bytes(rows, kblocks);
  MXMOE_REQUIRE(static_cast<int64_t>(dst.size()) == bytes, "swizzle_scales: dst.size() must be swizzled_scale_bytes(",
                rows, ", ", kblocks, ") = ", bytes, ", got ", dst.size());
  std::fill(dst.begin(), dst.end(), uint8_t{0});  // padding rows and k-blocks read as zero scales
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t kb = 0; kb < kblocks; ++kb) dst[swizzled_scale_offset(r, kb, kblocks)] = plain[r * kblocks + kb];
  }
}

void unswizzle_scales(std::span<const uint8_t> swizzled, int64_t rows, int64_t kblocks, std::span<uint8_t> plain) {
  check_dims(rows, kblocks, "unswizzle_scales");
  const int64_t bytes = swizzled_scale_bytes(rows, kblocks);
  MXMOE_REQUIRE(static_cast<int64_t>(swizzled.size()) == bytes, "unswizzle_scales: swizzled.size() must be swizzled_scale_bytes(",
                rows, ", ", kblocks, ") = ", bytes, ", got ", swizzled.size());
  MXMOE_REQUIRE(static_cast<int64_t>(plain.size()) == rows * kblocks, "unswizzle_scales: plain.size() must be rows*kblocks = ",
                rows * kblocks, ", got ", plain.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t kb = 0; kb < kblocks; ++kb) plain[r * kblocks + kb] = swizzled[swizzled_scale_offset(r, kb, kblocks)];
  }
}

std::vector<int64_t> grouped_scale_offsets(std::span<const int64_t> rows_per_group, int64_t kblocks) {
  MXMOE_REQUIRE(kblocks >= 0 && kblocks < kMaxDim, "grouped_scale_offsets: kblocks must be in [0, 2^31), got ", kblocks);
  std::vector<int64_t> offsets(rows_per_group.size() + 1, 0);
  for (size_t g = 0; g < rows_per_group.size(); ++g) {
    MXMOE_REQUIRE(rows_per_group[g] >= 0 && rows_per_group[g] < kMaxDim, "grouped_scale_offsets: rows_per_group[", g,
                  "] must be in [0, 2^31), got ", rows_per_group[g]);
    offsets[g + 1] = offsets[g] + swizzled_scale_bytes(rows_per_group[g], kblocks);
  }
  return offsets;
}

}  // namespace mxmoe
