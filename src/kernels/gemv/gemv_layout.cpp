#include "kernels/gemv/gemv_layout.hpp"

#include <cstring>

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

void pack_expert(const uint8_t* blocks, const uint8_t* scales, const PackedShape& shape, bool swiglu_pairs,
                 uint8_t* packed_weights, uint8_t* packed_scales) {
  std::memset(packed_weights, 0, static_cast<size_t>(shape.weight_bytes()));
  std::memset(packed_scales, 127, static_cast<size_t>(shape.scale_bytes()));
  for (int64_t tile = 0; tile < shape.tiles; ++tile)
    for (int64_t chunk = 0; chunk < shape.chunks; ++chunk)
      for (int half = 0; half < 2; ++half)
        for (int lane = 0; lane < 32; ++lane) {
          const int64_t block = chunk * kChunkBlocks + lane % 4;
          if (block >= shape.kblocks) continue;
          const int64_t row = source_row(tile, lane / 4 + 8 * half, swiglu_pairs);
          const int64_t tc = tile * shape.chunks + chunk;
          std::memcpy(packed_weights + (tc * 2 + half) * 512 + lane * 16, blocks + (row * shape.kblocks + block) * 16, 16);
          packed_scales[(tc * 32 + lane) * 2 + half] = scales[row * shape.kblocks + block];
        }
}

bool needs_wide_scales(const uint8_t* scales, int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    if (scales[i] > 128) return true;
  return false;
}

}  // namespace mxmoe::gemv
