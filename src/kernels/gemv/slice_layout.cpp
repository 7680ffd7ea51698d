#include "kernels/gemv/slice_layout.hpp"

#include <cstring>

#include "kernels/common/mx_decode.cuh"
#include "mxmoe/error.hpp"

namespace mxmoe::gemv {

SliceShape slice_shape(int64_t rows, int64_t kblocks) {
  MXMOE_REQUIRE(rows > 0 && rows % 16 == 0, "slice layout: rows must be a positive multiple of 16, got ", rows);
  MXMOE_REQUIRE(kblocks > 0, "slice layout: kblocks must be positive, got ", kblocks);
  SliceShape s;
  s.rows = rows;
  s.kblocks = kblocks;
  s.tiles = rows / 16;
  return s;
}

namespace {
int64_t record_of(const SliceShape& shape, int64_t row, int64_t block) {
  return (block * shape.tiles + row / 16) * kSliceRecordBytes;
}
}  // namespace

int64_t slice_nibble_offset(const SliceShape& shape, int64_t row, int64_t k, bool& high) {
  const int local = static_cast<int>(row % 16), g = local % 8, upper = local / 8;
  const int kk = static_cast<int>(k % 32), step = kk / 16, ks = kk % 16;
  const int q = (ks % 8) / 2, odd = ks % 2, second = ks / 8;
  // element index inside the lane's word (see slice_layout.hpp): e3/e7 row g, e2/e6 row g+8 at
  // k 2q(+1); e1/e5 row g, e0/e4 row g+8 at k 2q+8(+9)
  const int element = (3 - (2 * second + upper)) + 4 * odd;
  const int lane = g * 4 + q;
  high = element % 2 == 1;
  return record_of(shape, row, k / 32) + lane * 8 + step * 4 + element / 2;
}

int64_t slice_scale_offset(const SliceShape& shape, int64_t row, int64_t block) {
  const int local = static_cast<int>(row % 16);
  return record_of(shape, row, block) + kSliceWeightBytes + 2 * (local % 8) + local / 8;
}

void pack_expert_slices(const uint8_t* blocks, const uint8_t* scales, const SliceShape& shape, uint8_t* packed) {
  std::memset(packed, 0, static_cast<size_t>(shape.bytes()));
  for (int64_t row = 0; row < shape.rows; ++row)
    for (int64_t block = 0; block < shape.kblocks; ++block) {
      const uint8_t* src = blocks + (row * shape.kblocks + block) * 16;
      for (int e = 0; e < 32; ++e) {
        const uint8_t nibble = (src[e / 2] >> (4 * (e % 2))) & 0xF;
        bool high = false;
        const int64_t at = slice_nibble_offset(shape, row, block * 32 + e, high);
        packed[at] |= static_cast<uint8_t>(high ? nibble << 4 : nibble);
      }
      packed[slice_scale_offset(shape, row, block)] = scales[row * shape.kblocks + block];
    }
  // Every weight word into the kernels' scattered bit order (mx_decode.cuh).
  for (int64_t r = 0; r < shape.kblocks * shape.tiles; ++r) kernels::pack_e2m1_words(packed + r * kSliceRecordBytes, kSliceWeightBytes / 4);
}

}  // namespace mxmoe::gemv
