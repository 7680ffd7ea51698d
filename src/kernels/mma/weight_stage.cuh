#pragma once
// The weight half of a tensor-core pipeline stage: chunk c's records (gemv_layout.hpp) of the block's
// tiles [tile0, tile0 + tiles_per_block), by cp.async, 16 bytes per thread and step. Tiles past the
// GEMM's last are left alone (their warps do not compute). Shared by the Bf16Atom and MX kernels.
#include <cstdint>

#include "kernels/common/cp_async.cuh"
#include "layout/gemv_layout.hpp"

namespace mxmoe::mma {

// A record's 16-byte units, and how many of them each of kThreadsPerTile threads copies.
inline constexpr int kRecordUnits = gemv::kChunkBytes / 16;
template <int kThreadsPerTile>
inline constexpr int kRecordCopies = (kRecordUnits + kThreadsPerTile - 1) / kThreadsPerTile;

// One thread's 16-byte units of one record: u, u + kThreadsPerTile, ... from `src` (its unit u of the
// chunk's record) to `dst` (a generic pointer or a shared-window address); the last unit only where
// `last_ok` (last_record_unit_ok: the others are always inside the record).
template <int kThreadsPerTile, class Dst>
__device__ __forceinline__ void copy_record_units(Dst dst, const uint8_t* src, bool last_ok) {
  constexpr int kCopies = kRecordCopies<kThreadsPerTile>;
#pragma unroll
  for (int r = 0; r < kCopies; ++r)
    if (r < kCopies - 1 || last_ok)
      kernels::cp_async_16(dst + r * kThreadsPerTile * 16, src + r * kThreadsPerTile * 16, true);
}
// Whether thread u's last unit (u + (copies - 1) * kThreadsPerTile) is inside the record.
template <int kThreadsPerTile>
__device__ __forceinline__ bool last_record_unit_ok(int u) {
  constexpr int kLast = (kRecordCopies<kThreadsPerTile> - 1) * kThreadsPerTile;
  return kRecordUnits % kThreadsPerTile == 0 || u + kLast < kRecordUnits;
}

template <int kTilesPerBlock, int kThreads>
__device__ __forceinline__ void load_weight_records(uint8_t* stage, const uint8_t* expert_weights, int tile0,
                                                    int tiles, int chunks, int c) {
  // kThreadsPerTile threads per record, each copying 16-byte units u, u + kThreadsPerTile, ...: one
  // address computed per chunk, the rest constant offsets (a block-wide walk over the units cost
  // a division and a 64-bit multiply per unit, as many instructions as the chunk's MMAs).
  static_assert(kThreads % kTilesPerBlock == 0, "whole groups of threads per record");
  constexpr int kThreadsPerTile = kThreads / kTilesPerBlock;
  const int j = threadIdx.x / kThreadsPerTile, u = threadIdx.x % kThreadsPerTile;
  if (tile0 + j >= tiles) return;
  const uint8_t* src = expert_weights + (static_cast<int64_t>(tile0 + j) * chunks + c) * gemv::kChunkBytes + u * 16;
  copy_record_units<kThreadsPerTile>(stage + j * gemv::kChunkBytes + u * 16, src,
                                     last_record_unit_ok<kThreadsPerTile>(u));
}

}  // namespace mxmoe::mma
