#pragma once
// The fused decode kernel's GEMM2 layout (decode_kernel.cu), made once at upload next to the GEMV
// layout. The decode kernel consumes GEMM2 one K block (32 intermediate features, one MX block) at a
// time, right after it has made those features, so GEMM2's records are ordered by K block first:
//   expert -> K block f -> 16-row tile -> one record of 272 bytes:
//   bytes [lane*8, +8)        lane (g = lane/4, q = lane%4): two 32-bit words, K steps 0 and 1 of the
//                             block (16 K each); word s holds, element i at bits 4i..4i+3 before
//                             the bit scatter of every weight word (pack_e2m1x8, mx_decode.cuh):
//                             e3, e7 = (row g, k 2q, 2q+1), e2, e6 = (row g+8, k 2q, 2q+1),
//                             e1, e5 = (row g, k 2q+8, 2q+9), e0, e4 = (row g+8, k 2q+8, 2q+9)
//                             with k counted from 16s: decode_e2m1x8_packed then yields the m16n8k16 A
//                             fragment a0..a3 (common/mma_bf16.cuh) directly.
//   bytes [256 + 2g, +2)      the e8m0 scales of rows g and g+8 of the tile for this block
// The 16 rows x 32 K of a record are one contiguous 272-byte piece, 8 records a 2176-byte stage (the
// size of two GEMV chunks), and a warp's run of tiles for one block is one bulk copy.
#include <cstdint>

namespace mxmoe::gemv {

inline constexpr int kSliceWeightBytes = 256;
inline constexpr int kSliceRecordBytes = kSliceWeightBytes + 16;  // 272

struct SliceShape {
  int64_t rows = 0;     // N (multiple of 16)
  int64_t kblocks = 0;  // K / 32
  int64_t tiles = 0;    // N / 16
  int64_t bytes() const { return kblocks * tiles * kSliceRecordBytes; }  // one expert
};

SliceShape slice_shape(int64_t rows, int64_t kblocks);

// Byte offset, inside one expert's packed bytes, of the nibble of (row, k), and whether it is the
// high nibble of that byte, in the natural word order (before pack_e2m1x8 scatters each word's bits); and the offset of the scale byte of (row, block).
int64_t slice_nibble_offset(const SliceShape& shape, int64_t row, int64_t k, bool& high);
int64_t slice_scale_offset(const SliceShape& shape, int64_t row, int64_t block);

// One expert: blocks [rows, kblocks, 16] and scales [rows, kblocks] (checkpoint layout) into
// packed [shape.bytes()].
void pack_expert_slices(const uint8_t* blocks, const uint8_t* scales, const SliceShape& shape, uint8_t* packed);

}  // namespace mxmoe::gemv
