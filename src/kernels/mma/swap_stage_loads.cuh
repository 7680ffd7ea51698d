#pragma once
// The stage copies of the swap-AB tiles (swap_gemm_kernel.cu): chunk c's activations of the block's
// rows and its weight tiles' records, by cp.async, with every thread's sources and destinations
// worked out once per block, so that a chunk costs an offset per source and the copies. Recomputed per
// chunk from the block's indices (load_act_chunk and load_weight_records, as the other tiles do), the
// 64-bit source arithmetic took about 90 of a warp's 330-350 instructions per chunk of the 16-row tile.
//
// Thread i copies activation group i % 16 of rows i / 16 + 16 * round (placed by granule_slot, as
// act_stage.cuh says) and 16-byte units u, u + kThreadsPerTile, ... of tile i / kThreadsPerTile's record:
// the copies of load_act_chunk and load_weight_records (copy_act_rounds, copy_record_units), with
// their addresses hoisted.
#include <cstdint>

#include "kernels/common/cp_async.cuh"
#include "kernels/gemv/gemv_layout.hpp"
#include "kernels/mma/act_stage.cuh"
#include "kernels/mma/m_tile_rows.cuh"
#include "kernels/mma/mma_gemm.hpp"
#include "kernels/mma/weight_stage.cuh"

namespace mxmoe::mma {

template <int kRows, int kTiles, int kThreads>
class SwapStageLoads {
 public:
  static constexpr int kActBytes = staged_rows_bytes(kRows);
  static constexpr int kStageBytes = kActBytes + kTiles * gemv::kChunkBytes;

  // stage0: the shared-window address of stage 0; src_row as begin_m_tile() fills it.
  __device__ __forceinline__ SwapStageLoads(const MmaArgs& a, const int64_t (&src_row)[kRows],
                                            const uint8_t* expert_weights, int tile0, uint32_t stage0)
      : src_row_(src_row), act_(a.act), k_(a.k) {
    const int gr = threadIdx.x & 15, r0 = threadIdx.x >> 4;
    kk0_ = gr * 8;
    act_dst_ = stage0 + r0 * kRowBytes + granule_slot(gr >> 2, gr & 3) * 16;
    if constexpr (kRounds == 1) {
      const int64_t row = src_row[r0];
      row_ok_ = row >= 0;
      act_row_ = a.act + (row_ok_ ? row : 0) + kk0_;
    }
    const int j = threadIdx.x / kThreadsPerTile, u = threadIdx.x % kThreadsPerTile;
    weights_ok_ = tile0 + j < a.tiles;  // tiles past the GEMM's last: their warps do not compute
    last_unit_ok_ = last_record_unit_ok<kThreadsPerTile>(u);
    weights_ = expert_weights + static_cast<int64_t>(tile0 + j) * a.chunks * gemv::kChunkBytes + u * 16;
    weight_dst_ = stage0 + kActBytes + j * gemv::kChunkBytes + u * 16;
  }

  // Chunk c into stage `stage`: padding rows and K past the end read as zeros.
  __device__ __forceinline__ void load(int stage, int c) const {
    const uint32_t stage_offset = static_cast<uint32_t>(stage * kStageBytes);
    if constexpr (kRounds == 1) {
      const bool valid = row_ok_ && kk0_ + c * gemv::kChunkK < k_;
      kernels::cp_async_16(act_dst_ + stage_offset, valid ? act_row_ + c * gemv::kChunkK : act_, valid);
    } else {
      // Rows r0 + 16 * round sit at the same place in their rows (a multiple of 8 rows apart).
      copy_act_rounds<kRows, kRowsPerRound>(src_row_, static_cast<int>(threadIdx.x >> 4), act_,
                                            kk0_ + c * gemv::kChunkK, k_, act_dst_ + stage_offset,
                                            kRowsPerRound * kRowBytes);
    }
    if (weights_ok_)
      copy_record_units<kThreadsPerTile>(weight_dst_ + stage_offset, weights_ + c * gemv::kChunkBytes, last_unit_ok_);
  }

 private:
  static constexpr int kRowsPerRound = kThreads / 16;
  static constexpr int kRounds = kRows / kRowsPerRound;
  static_assert(kThreads % 16 == 0 && kRows % kRowsPerRound == 0, "whole rounds of the block's threads");
  static_assert(kRowsPerRound % 8 == 0, "rounds 8 rows apart: the same place in a row swizzled by row % 8");
  static_assert(kThreads % kTiles == 0, "whole groups of threads per record");
  static constexpr int kThreadsPerTile = kThreads / kTiles;

  const int64_t (&src_row_)[kRows];
  const uint16_t* act_;
  const uint16_t* act_row_ = nullptr;  // one round: the thread's row at its group's K of chunk 0
  const uint8_t* weights_;
  uint32_t act_dst_, weight_dst_;
  int kk0_, k_;
  bool row_ok_ = false, weights_ok_, last_unit_ok_;
};

}  // namespace mxmoe::mma
