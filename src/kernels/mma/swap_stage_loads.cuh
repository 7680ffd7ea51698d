#pragma once
// The stage copies of the 16- and 32-row swap-AB tiles (swap_gemm_kernel.cu): chunk c's activations of
// the block's rows by cp.async, every thread's source and destination worked out once per block, and
// its weight tiles' records by one tensor copy (thread 0), completing on the stage's mbarrier
// (run_chunk_pipeline with barriers, chunk_pipeline.cuh). Recomputed per chunk from the block's indices
// (load_act_chunk and load_weight_records, as the other tiles do), the 64-bit source arithmetic took
// about 90 of a warp's 330-350 instructions per chunk of the 16-row tile; with the records' 16-byte
// copies hoisted too, ptxas still spent about 55 on the copies at 80 registers.
//
// Thread i copies activation group i % 16 of rows i / 16 + 16 * round (placed by granule_slot, as
// act_stage.cuh says): the copies of load_act_chunk (copy_act_rounds), with their addresses hoisted.
// The weights' map (record_map.hpp, built by launch_swap) has a box of the block's kTiles records of one
// chunk, which lands as the stage's records back to back. A block's tiles past its expert's last are its
// neighbour's (or zeros past the last expert's): their warps do not compute.
#include <cuda.h>

#include <cstdint>

#include "kernels/common/cp_async.cuh"
#include "kernels/common/tma.cuh"
#include "layout/gemv_layout.hpp"
#include "kernels/mma/act_stage.cuh"
#include "kernels/mma/m_tile_rows.cuh"
#include "kernels/mma/mma_gemm.hpp"

namespace mxmoe::mma {

template <int kRows, int kTiles, int kThreads>
class SwapStageLoads {
 public:
  static constexpr int kActBytes = staged_rows_bytes(kRows);
  static constexpr int kStageBytes = kActBytes + kTiles * gemv::kChunkBytes;

  // stage0, bar0: the shared-window addresses of stage 0 and of its barrier (stage s's 8 s bytes on);
  // src_row as begin_m_tile() fills it; expert_tile0: the block's first tile among all experts' tiles.
  __device__ __forceinline__ SwapStageLoads(const MmaArgs& a, const int64_t (&src_row)[kRows],
                                            const CUtensorMap* weights, int expert_tile0, uint32_t stage0,
                                            uint32_t bar0)
      : src_row_(src_row), act_(a.act), weights_(weights), k_(a.k), expert_tile0_(expert_tile0), bar0_(bar0),
        weight_dst_(stage0 + kActBytes) {
    const int gr = threadIdx.x & 15, r0 = threadIdx.x >> 4;
    kk0_ = gr * 8;
    act_dst_ = stage0 + r0 * kRowBytes + granule_slot(gr >> 2, gr & 3) * 16;
    if constexpr (kRounds == 1) {
      const int64_t row = src_row[r0];
      act_row_ = a.act + (row >= 0 ? row : 0) + kk0_;
      // Chunks whose K at this thread's group is inside the row: none for a padding row.
      act_chunks_ = row >= 0 && kk0_ < a.k ? (a.k - kk0_ + gemv::kChunkK - 1) / gemv::kChunkK : 0;
    }
  }

  // Chunk c into stage `stage`: padding rows and K past the end read as zeros.
  __device__ __forceinline__ void load(int stage, int c) const {
    const uint32_t stage_offset = static_cast<uint32_t>(stage * kStageBytes);
    if (threadIdx.x == 0) {
      const uint32_t bar = bar0_ + 8u * static_cast<uint32_t>(stage);
      kernels::mbarrier_arrive_expect_tx(bar, kTiles * gemv::kChunkBytes);
      kernels::tma_load_3d(weight_dst_ + stage_offset, weights_, 0, c, expert_tile0_, bar);
    }
    if constexpr (kRounds == 1) {
      const bool valid = c < act_chunks_;
      kernels::cp_async_16(act_dst_ + stage_offset, valid ? act_row_ + c * gemv::kChunkK : act_, valid);
    } else {
      // Rows r0 + 16 * round sit at the same place in their rows (a multiple of 8 rows apart).
      copy_act_rounds<kRows, kRowsPerRound>(src_row_, static_cast<int>(threadIdx.x >> 4), act_,
                                            kk0_ + c * gemv::kChunkK, k_, act_dst_ + stage_offset,
                                            kRowsPerRound * kRowBytes);
    }
  }

 private:
  static constexpr int kRowsPerRound = kThreads / 16;
  static constexpr int kRounds = kRows / kRowsPerRound;
  static_assert(kThreads % 16 == 0 && kRows % kRowsPerRound == 0, "whole rounds of the block's threads");
  static_assert(kRowsPerRound % 8 == 0, "rounds 8 rows apart: the same place in a row swizzled by row % 8");
  static_assert(kStageBytes % 128 == 0 && kActBytes % 128 == 0, "each stage's tensor copy lands 128-byte aligned");

  const int64_t (&src_row_)[kRows];
  const uint16_t* act_;
  const uint16_t* act_row_ = nullptr;  // one round: the thread's row at its group's K of chunk 0
  const CUtensorMap* weights_;
  int k_, expert_tile0_;
  uint32_t bar0_, weight_dst_, act_dst_;
  int kk0_, act_chunks_ = 0;
};

}  // namespace mxmoe::mma
