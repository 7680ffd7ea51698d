#include "layout/gemv_layout.hpp"

#include <cstring>

#include "layout/fp8_decode.cuh"
#include "layout/mx_decode.cuh"
#include "mxmoe/error.hpp"

namespace mxmoe::gemv {

PackedShape packed_shape(int64_t rows, int64_t kblocks) {
  MXMOE_REQUIRE(rows > 0 && rows % kTileRows == 0, "gemv layout: rows must be a positive multiple of 16, got ", rows);
  MXMOE_REQUIRE(kblocks > 0, "gemv layout: kblocks must be positive, got ", kblocks);
  PackedShape s;
  s.rows = rows;
  s.kblocks = kblocks;
  s.tiles = rows / kTileRows;
  s.chunks = (kblocks + kChunkBlocks - 1) / kChunkBlocks;
  return s;
}

int64_t source_row(int64_t tile, int local_row, bool swiglu_pairs) {
  if (!swiglu_pairs) return tile * kTileRows + local_row;
  const int64_t feature = tile * 8 + (local_row % 8);
  return 2 * feature + (local_row >= 8 ? 1 : 0);  // gate rows are even, linear rows odd
}

namespace {
int64_t record_of(const PackedShape& shape, int64_t tile, int64_t block) {
  return (tile * shape.chunks + block / kChunkBlocks) * kChunkBytes;
}
}  // namespace

int64_t packed_weight_offset(const PackedShape& shape, int64_t tile, int local_row, int64_t block) {
  return record_of(shape, tile, block) +
         record_data_offset(local_row % 8, static_cast<int>(block % kChunkBlocks), local_row / 8);
}

int64_t packed_scale_offset(const PackedShape& shape, int64_t tile, int local_row, int64_t block) {
  return record_of(shape, tile, block) +
         record_scale_offset(local_row % 8, static_cast<int>(block % kChunkBlocks), local_row / 8);
}

void pack_expert(const uint8_t* blocks, const uint8_t* scales, const PackedShape& shape, bool swiglu_pairs,
                 uint8_t* packed, const int8_t* fp8_exponents) {
  // Padding blocks: zero weights, scale 127 (1.0); shift code 0 in a W4A8 record (any table decodes
  // their zero codes to zero).
  for (int64_t r = 0; r < shape.tiles * shape.chunks; ++r) {
    std::memset(packed + r * kChunkBytes, fp8_exponents != nullptr ? 0 : 127, kChunkScaleBytes);
    std::memset(packed + r * kChunkBytes + kChunkScaleBytes, 0, kChunkWeightBytes);
  }
  for (int64_t tile = 0; tile < shape.tiles; ++tile)
    for (int local_row = 0; local_row < kTileRows; ++local_row) {
      const int64_t row = source_row(tile, local_row, swiglu_pairs);
      for (int64_t block = 0; block < shape.kblocks; ++block) {
        std::memcpy(packed + packed_weight_offset(shape, tile, local_row, block),
                    blocks + (row * shape.kblocks + block) * 16, 16);
        const uint8_t scale = scales[row * shape.kblocks + block];
        packed[packed_scale_offset(shape, tile, local_row, block)] =
            fp8_exponents == nullptr
                ? scale
                : static_cast<uint8_t>(static_cast<int8_t>(kernels::fp8_shift_code(scale, fp8_exponents[row])));
      }
    }
  // Every weight word into the kernels' bit order: pack_e2m1x8's (mx_decode.cuh), or a W4A8 record's
  // (fp8_decode.cuh). Both keep the padding's zero words zero.
  for (int64_t r = 0; r < shape.tiles * shape.chunks; ++r) {
    uint8_t* words = packed + r * kChunkBytes + kChunkScaleBytes;
    if (fp8_exponents == nullptr)
      kernels::pack_e2m1_words(words, kChunkWeightBytes / 4, [](uint32_t w) { return kernels::pack_e2m1x8(w); });
    else
      kernels::pack_e2m1_words(words, kChunkWeightBytes / 4, [](uint32_t w) { return kernels::pack_e2m1x8_fp8(w); });
  }
}

bool needs_wide_scales(const uint8_t* scales, int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    if (scales[i] > 128) return true;
  return false;
}

}  // namespace mxmoe::gemv
