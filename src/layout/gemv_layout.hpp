#pragma once
// The GEMV family's weight layout, made once at upload from the checkpoint layout. Every kernel family
// reads it (the tensor-core tiles too), through the offsets below.
//
// A warp computes a tile of 16 output rows with one m16n8k16 bf16 MMA per 16-wide K step. It walks
// K in chunks of 128 (4 MX blocks). Each (tile, chunk) is one record of 1088 bytes, tiles' records
// back to back, so a run of chunks is one contiguous bulk copy. Tile row g + 8h (g < 8, h < 2), block
// b (0..3) of the chunk:
//   its e8m0 scale at byte   (3 - b) * 16 + 2g + h                    (bytes [0, 64))
//   its 16 weight bytes at   64 + 256b + 128h + 16 (g ^ 2b)           (bytes [64, 1088))
// Lane (g, t) of a warp reads block t of rows g and g + 8: two 16-byte loads, conflict free (a quarter
// warp's 8 lanes, g in {2q, 2q + 1}, t in 0..3, see 8 distinct g ^ 2t), and its two scales as one u16.
// Scales run backwards and data forwards from byte 64, so a chunk's first n blocks are the one run
// [64 - 16n, 64 + 256n): when K is not a multiple of 128 the last chunk holds n = (K / 32) % 4 blocks,
// and a tile's records end in 256 (4 - n) bytes of padding that a copy can leave out (tail_cut_bytes).
// GEMM1 rows are re-ordered so tile rows 0-7 are the gates and 8-15 the linears of intermediate
// features 8*tile .. 8*tile+7: each lane then holds a (gate, linear) pair for the SwiGLU epilogue.
// Blocks past K are zero weights with scale 127 (1.0). Last, every 32-bit weight word is stored in the
// bit order of pack_e2m1x8 (mx_decode.cuh), which the kernels decode in half the instructions; the
// offsets below address the words before that scatter. A W4A8 layer's records (the FP8 wgmma tiles,
// fp8_decode.cuh) have their own bit order and shift codes in place of the scales (pack_expert).
#include <cstdint>

#include "mxmoe/host_device.hpp"

namespace mxmoe::gemv {

inline constexpr int kTileRows = 16;
inline constexpr int kChunkBlocks = 4;
inline constexpr int kChunkK = kChunkBlocks * 32;
inline constexpr int kChunkWeightBytes = kTileRows * kChunkBlocks * 16;  // 1024
inline constexpr int kChunkScaleBytes = kTileRows * kChunkBlocks;        // 64
inline constexpr int kChunkBytes = kChunkWeightBytes + kChunkScaleBytes;  // one record
inline constexpr int kRecordHalfBytes = 128;  // rows g + 8 sit this far after rows g

// In-record byte offsets (above) of (tile row g + 8 * half, block `block` of the chunk).
MXMOE_HOST_DEVICE constexpr int record_data_offset(int g, int block, int half) {
  return kChunkScaleBytes + 256 * block + kRecordHalfBytes * half + 16 * (g ^ (2 * block));
}
MXMOE_HOST_DEVICE constexpr int record_scale_offset(int g, int block, int half) {
  return (kChunkBlocks - 1 - block) * 16 + 2 * g + half;
}
// Lane (g, t)'s 16 bytes of rows g (+ kRecordHalfBytes: rows g + 8) and its two scale bytes (a u16).
MXMOE_HOST_DEVICE constexpr int lane_data_offset(int lane) { return record_data_offset(lane / 4, lane % 4, 0); }
MXMOE_HOST_DEVICE constexpr int lane_scale_offset(int lane) { return record_scale_offset(lane / 4, lane % 4, 0); }
// Bytes at the end of a tile's last record that hold only padding (K = 32 * kblocks): 0 when K is a
// multiple of 128. A copy of a tile's records that ends with its last chunk may leave them out.
MXMOE_HOST_DEVICE constexpr int tail_cut_bytes(int64_t kblocks) {
  return kblocks % kChunkBlocks == 0 ? 0 : 256 * static_cast<int>(kChunkBlocks - kblocks % kChunkBlocks);
}

struct PackedShape {
  int64_t rows = 0;     // output rows N (multiple of 16)
  int64_t kblocks = 0;  // K / 32
  int64_t tiles = 0;    // N / 16
  int64_t chunks = 0;   // ceil(kblocks / 4)
  int64_t bytes() const { return tiles * chunks * kChunkBytes; }  // one expert
};

PackedShape packed_shape(int64_t rows, int64_t kblocks);

// The checkpoint row stored at tile row `local_row` (0..15) of `tile`.
int64_t source_row(int64_t tile, int local_row, bool swiglu_pairs);

// Byte offsets, inside one expert's packed bytes, of the weights and of the scale of (tile row
// `local_row` of `tile`, block `block`).
int64_t packed_weight_offset(const PackedShape& shape, int64_t tile, int local_row, int64_t block);
int64_t packed_scale_offset(const PackedShape& shape, int64_t tile, int local_row, int64_t block);

// One expert: blocks [rows, kblocks, 16] and scales [rows, kblocks] (checkpoint layout) into
// packed [shape.bytes()]. With `fp8_exponents` (the expert's row exponents, checkpoint row order:
// fp8_row_exponents.hpp) the records are a W4A8 layer's (fp8_decode.cuh): each word in the fp8 bit
// order instead of pack_e2m1x8's, each scale byte the block's shift code (padding blocks: 0).
void pack_expert(const uint8_t* blocks, const uint8_t* scales, const PackedShape& shape, bool swiglu_pairs,
                 uint8_t* packed, const int8_t* fp8_exponents = nullptr);

// Whether any scale byte needs the GEMV kernel's general multiplier path (above 128, or 0xFF = NaN).
bool needs_wide_scales(const uint8_t* scales, int64_t count);

}  // namespace mxmoe::gemv
