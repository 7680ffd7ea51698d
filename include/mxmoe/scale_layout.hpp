#pragma once
// The "128x4" swizzled block-scale layout of Blackwell block-scaled MMAs, cuBLASLt VEC32_UE8M0,
// CUTLASS Sm1xxBlkScaledConfig and FlashInfer (FACTS.md §4). Sizes are always built from the
// padded dimensions: rows to a multiple of 128, k-blocks to a multiple of 4.
// The offset function is constexpr and host/device so kernels and CPU tests share one definition.
#include <cstdint>
#include <span>
#include <vector>

#include "mxmoe/host_device.hpp"

namespace mxmoe {

MXMOE_HOST_DEVICE constexpr int64_t padded_scale_rows(int64_t rows) { return (rows + 127) / 128 * 128; }
MXMOE_HOST_DEVICE constexpr int64_t padded_kblocks(int64_t kblocks) { return (kblocks + 3) / 4 * 4; }

// Byte offset of the scale of row r, k-block kb, in a matrix of `kblocks` k-blocks (unpadded count;
// the function pads it).
MXMOE_HOST_DEVICE constexpr int64_t swizzled_scale_offset(int64_t r, int64_t kb, int64_t kblocks) {
  const int64_t n_cb = padded_kblocks(kblocks) / 4;
  return (r / 128) * (n_cb * 512) + (kb / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + (kb % 4);
}

// Bytes of one swizzled matrix of `rows` x `kblocks` scales, padding included.
MXMOE_HOST_DEVICE constexpr int64_t swizzled_scale_bytes(int64_t rows, int64_t kblocks) {
  return padded_scale_rows(rows) * padded_kblocks(kblocks);
}

// Plain row-major [rows, kblocks] -> swizzled (dst.size() == swizzled_scale_bytes; padding = 0).
void swizzle_scales(std::span<const uint8_t> plain, int64_t rows, int64_t kblocks, std::span<uint8_t> dst);
// Swizzled -> plain row-major [rows, kblocks] (padding ignored).
void unswizzle_scales(std::span<const uint8_t> swizzled, int64_t rows, int64_t kblocks, std::span<uint8_t> plain);

// Per-group (e.g. per-expert) byte offsets into one buffer holding each group's swizzled scales one
// after another: result has groups+1 entries, result[g+1]-result[g] = swizzled_scale_bytes(rows[g], kblocks).
std::vector<int64_t> grouped_scale_offsets(std::span<const int64_t> rows_per_group, int64_t kblocks);

}  // namespace mxmoe
