#pragma once
// The GEMV family's weight layout, made once at upload from the checkpoint layout.
//
// A warp computes a tile of 16 output rows with one m16n8k16 bf16 MMA per 16-wide K step. It walks
// K in chunks of 128 (4 MX blocks). Each (tile, chunk) is one record of 1088 bytes, tiles' records
// back to back, so a run of chunks is one contiguous bulk copy:
//   bytes [half*512 + lane*16, +16)  the 16 bytes (one MX block) of tile row (lane/4 + 8*half),
//                                    block (4*chunk + lane%4): two conflict-free 16-byte reads a lane
//   byte  1024 + lane*2 + half       that block's e8m0 scale
// GEMM1 rows are re-ordered so tile rows 0-7 are the gates and 8-15 the linears of intermediate
// features 8*tile .. 8*tile+7: each lane then holds a (gate, linear) pair for the SwiGLU epilogue.
// Blocks past K (when K is not a multiple of 128) are zero weights with scale 127 (1.0). Last, every
// 32-bit weight word is stored in the bit order of pack_e2m1x8 (mx_decode.cuh), which the kernels
// decode in half the instructions; the offsets below address the words before that scatter.
#include <cstdint>

namespace mxmoe::gemv {

inline constexpr int kTileRows = 16;
inline constexpr int kChunkBlocks = 4;
inline constexpr int kChunkK = kChunkBlocks * 32;
inline constexpr int kChunkWeightBytes = kTileRows * kChunkBlocks * 16;  // 1024
inline constexpr int kChunkScaleBytes = kTileRows * kChunkBlocks;        // 64
inline constexpr int kChunkBytes = kChunkWeightBytes + kChunkScaleBytes;  // one record

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
// packed [shape.bytes()].
void pack_expert(const uint8_t* blocks, const uint8_t* scales, const PackedShape& shape, bool swiglu_pairs,
                 uint8_t* packed);

// Whether any scale byte needs the GEMV kernel's general multiplier path (above 128, or 0xFF = NaN).
bool needs_wide_scales(const uint8_t* scales, int64_t count);

}  // namespace mxmoe::gemv
