#pragma once
// One pipeline stage of the wgmma tiles (wgmma_gemm_kernel.cu): how a chunk of K gets into shared
// memory with few instructions, since the block's warps also decode the weights and are short of
// issue slots (the earlier per-thread cp.async of both halves cost as many instructions as the
// chunk's decode and MMAs).
// - Weights: each warp's lane 0 requests its own tile's record (gemv_layout.hpp, contiguous) with one
//   bulk copy that completes on the stage's mbarrier (one arrival per loaded record).
// - Activations: 16-byte cp.async units, rows of 32 per round (thread i: unit i % 16 of row i / 16 +
//   32 * round); a round is one shared-memory load of the row's unit offset, an add and the copy. The
//   rounds of the next chunk are spread over the current chunk's wgmma groups (the caller's loop).
//   Rounds wholly past the tile's rows are skipped; padding rows inside a round copy row 0's data:
//   a B row only reaches its own accumulator column, which is never stored.
#include <cstdint>

#include "kernels/common/bulk_copy.cuh"
#include "kernels/common/cp_async.cuh"
#include "kernels/gemv/gemv_layout.hpp"

namespace mxmoe::sm90 {

inline constexpr int kActRowsPerRound = 32;  // 512 threads, 16 units of a 128-wide chunk per row

// Thread-constant parts of the activation rounds: the unit of a row it copies, and where that unit
// lands in a stage (128-byte swizzle: rows a multiple of 8 apart share the swizzle, so rounds differ
// by a constant).
struct ActRound {
  int unit;      // 0..15: 8 bf16 of K
  int row;       // its row in round 0
  uint32_t dst;  // byte offset in a stage's activation half of round 0
};

template <int kHalfBytes>
__device__ __forceinline__ ActRound act_round_of(int thread) {
  ActRound r;
  r.unit = thread & 15;
  r.row = thread >> 4;
  r.dst = static_cast<uint32_t>((r.unit >> 3) * kHalfBytes + r.row * 128 + (((r.unit & 7) ^ (r.row & 7)) << 4));
  return r;
}

// Round `round` of chunk c into the stage at `stage` (activations first): `units` holds each row's
// activations as the offset of its first 16-byte unit in `act`.
__device__ __forceinline__ void load_act_round(uint8_t* stage, const uint4* act, const uint32_t* units,
                                               const ActRound& t, int c, int round, bool copy) {
  const int r = t.row + round * kActRowsPerRound;
  const uint32_t unit = units[r] + static_cast<uint32_t>(c * (gemv::kChunkK / 8) + t.unit);  // 32-bit: one wide add
  kernels::cp_async_16_if(stage + t.dst + round * kActRowsPerRound * 128, act + unit, copy);
}

// This warp's record of chunk c (lane 0), on the stage's barrier.
__device__ __forceinline__ void load_weight_record(uint8_t* record, const uint8_t* tile_records, int c,
                                                   uint64_t* full) {
  kernels::mbarrier_arrive_expect_tx(full, gemv::kChunkBytes);
  kernels::bulk_copy_to_shared(record, tile_records + static_cast<int64_t>(c) * gemv::kChunkBytes, gemv::kChunkBytes,
                               full);
}

}  // namespace mxmoe::sm90
