#pragma once
// The FP8 wgmma tiles' shapes and device steps (wgmma_fp8_gemm_kernel.cu; the family:
// wgmma_fp8_gemm.hpp). Included by that one translation unit only (its names are internal to it).
#include <cuda.h>

#include <cstdint>

#include "common/cuda_check.hpp"
#include "common/m_tiles.cuh"
#include "common/pdl_launch.cuh"
#include "kernels/common/record_map.hpp"
#include "kernels/common/shared_load.cuh"
#include "kernels/common/static_smem.hpp"
#include "kernels/common/tensor_map.hpp"
#include "kernels/common/tma.cuh"
#include "kernels/common/wgmma.cuh"
#include "kernels/common/wgmma_fp8.cuh"
#include "kernels/mma/m_tile_rows.cuh"
#include "kernels/mma/swap_epilogue.cuh"
#include "kernels/sm90/fp8_chunk_order.hpp"
#include "kernels/sm90/narrow_paths.cuh"
#include "kernels/sm90/sm90_host.hpp"
#include "kernels/sm90/wgmma_block.cuh"
#include "kernels/sm90/split_k.cuh"
#include "kernels/sm90/wgmma_fp8_gemm.hpp"
#include "kernels/sm90/wgmma_gemm.hpp"
#include "layout/fp8_decode.cuh"
#include "layout/gemv_layout.hpp"

namespace mxmoe::sm90 {
namespace {

template <int kRows>
struct Fp8Shape {
  static_assert(kRows % 8 == 0, "whole 8-row swizzle groups");
  // Warps (one 16-row weight tile each): 16 (256 weight rows, as the bf16 tiles), 12 in the 192-row tile,
  // whose 96 accumulators a thread need more registers than 16 warps leave. 12 tiles also divide gpt-oss's
  // GEMMs (5760 and 2880 rows: 30 and 15 blocks; 256 leaves a half and a quarter block).
  static constexpr int kWarps = kRows == 192 ? 12 : 16;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kTiles = kWarps;
  static constexpr int kActBytes = kRows * kLineBytes;  // the chunk's line of every row
  static constexpr int kWeightBytes = kTiles * gemv::kChunkBytes;
  static constexpr int kStageBytes = (kActBytes + kWeightBytes + 1023) / 1024 * 1024;
  // Two blocks per SM up to 64 rows (64 registers a thread, as the bf16 tiles; at 64 rows ptxas then
  // serialises the wgmmas (C7511), as in the bf16 64-row tile, and the SM's 8 warpgroups hide it: on an
  // H200 gpt-oss-120b's layer at T = 1024 took 911-915 us at one block, 834-835 at two), one from 128.
  // Half the activation bytes of the bf16 stages leave room for 4 stages in every height.
  static constexpr int kBlocksPerSm = wgmma_fp8_blocks_per_sm(kRows);
  // The epilogue's per-row factors (GEMM1: each row's activation scale; GEMM2: its routing weight) staged
  // in shared memory at the block's start, in the 128- and 192-row tiles. Loaded per output element in
  // the epilogue, each load (GEMM2: two dependent ones) waited behind the stores before it: ncu at
  // T = 4096 sampled more of GEMM2's stalls there than at its ring's waits. A/B on an H200 (fp8): the
  // 192-row tile, gpt-oss-120b T = 4096 1537-1542 -> 1403-1417 us; the 128-row tile, T = 2048 1048 ->
  // 1021, 3072 1210 -> 1159-1165, 3584 1319-1324 -> 1276-1277 (20b T = 768 312-318 -> 304-306). Staged
  // in every tile, T = 64 (32-row tile, 2-3 rows an m-tile) lost 2.4% and T = 1024 (64 rows) 0.5%: the
  // barrier after the main loop costs more than the loads it hides where an m-tile has few rows.
  static constexpr bool kStagedFactors = kRows >= 128;
  static constexpr int kStages = 4;
  static constexpr int kSmemBytes = kStages * kStageBytes + 1024;  // + the base's alignment to 1024
  // The narrower wgmmas of m-tiles with fewer rows (narrow_paths.cuh), as the bf16 tiles': in the 32-row
  // tile 8, 16 and 24 (gpt-oss-120b has 2.3 rows per expert at T = 64, 8 at 256, 16 at 512), in the
  // 64-row tile every multiple of 8 from 24 (32 +- 6 at T = 1024), in the 128-row tile 64 and 96, in the
  // 192-row tile 96, 128, 144 and 160 (128 +- 11 at T = 4096; a fifth path, or 8, made ptxas serialise its
  // wgmmas, C7511/C7512, at the 168 registers of 12 warps).
  static constexpr int kNarrowPaths = kRows == 32 ? 3 : kRows == 64 ? 5 : kRows == 128 ? 2 : 4;
  static constexpr int narrow_n(int path) {
    if (kRows == 192) return path == 0 ? 96 : 128 + 16 * (path - 1);
    return kRows == 32 ? 8 + 8 * path : kRows == 64 ? 24 + 8 * path : 64 + 32 * path;
  }
  static constexpr int path_n(int path) { return path < kNarrowPaths ? narrow_n(path) : kRows; }
  static_assert(kNarrowPaths <= kMaxNarrowPaths, "Fp8Maps holds a map per narrower path");
  static_assert(kNarrowPaths == 0 || (narrow_n(kNarrowPaths - 1) < kRows && narrow_n(0) % 8 == 0),
                "narrower paths are narrower, in whole 8-row swizzle groups");
};

// The descriptors of a launch (kernel parameter, __grid_constant__).
struct Fp8Maps {
  CUtensorMap weights;  // 3D: 136 x 8 bytes, chunks, experts x tiles; box {136, 1, the shape's kTiles}
  CUtensorMap act;      // 2D bytes: K padded to whole chunks, rows; box {128, rows}, 128-byte swizzle
  CUtensorMap act_narrow[kMaxNarrowPaths];  // the same with box {128, N} per narrower path; zero past the tile's
};

#if MXMOE_HAS_WGMMA
__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
#endif

// Chunk c of the block's tiles (the first of them tile `expert_tile0` of the [experts x tiles] view)
// and of its m-tile (first row `row0`) into `stage`: the activation lines, then the kTiles records. `act`:
// the map of the rows the m-tile's wgmma reads (the tile's or a narrower path's), `act_box_bytes` its
// box's bytes. Rows past the tensor's read as zeros and still count in the transaction bytes.
template <int kRows>
__device__ __forceinline__ void load_fp8_stage(uint8_t* stage, const Fp8Maps& maps, const CUtensorMap* act,
                                               uint32_t act_box_bytes, int c, int expert_tile0, int row0,
                                               uint64_t* full) {
  using S = Fp8Shape<kRows>;
  kernels::mbarrier_arrive_expect_tx(full, act_box_bytes + S::kWeightBytes);
  kernels::tma_load_3d(stage + S::kActBytes, &maps.weights, 0, c, expert_tile0, full);
  kernels::tma_load_2d(stage, act, c * gemv::kChunkK, row0, full);
}

// The lane's decode tables (its MX block in rows g and g+8): each of its two shift codes (a byte load each)
// is its table's byte offset in the block's array of every code's table (fp8_entry_table, at shared-window
// address `tables`), so a table is one 8-byte load, whatever the code (a NaN scale, a block more than 5
// exponents below its row's largest). This replaced two multiply-adds per table behind a warp vote for the
// rare tables: 24 instructions a chunk with ptxas's divergence bookkeeping, now 4; and with one 16-bit load
// of both codes and a mask ptxas serialised the 192-row GEMM1's wgmmas (C7512). A/B in docs/fp8.md.
__device__ __forceinline__ void lane_fp8_tables(const uint8_t* record, int lane, uint32_t tables, kernels::Fp8Table& lo,
                                                kernels::Fp8Table& hi) {
  const uint8_t* codes = record + gemv::lane_scale_offset(lane);
  const uint2 l = kernels::ld_shared_v2(tables + codes[0]), h = kernels::ld_shared_v2(tables + codes[1]);
  lo = {l.x, l.y};
  hi = {h.x, h.y};
}

// One chunk of one warpgroup: the warp's record decoded word by word to e4m3 (fp8_decode.cuh), word w
// of MX block t of rows g and g+8 being K step w's A fragment (fp8_chunk_order.hpp), one wgmma of
// N = kN (the block's first kN rows, kN <= kRows) per step, one group per step. Before step w all groups
// but the last are retired, so the fragments of step w - 2 are free (the bf16 tiles' scheme,
// wgmma_tile.cuh). between(w) runs after group w is issued (the ring's release and refill). The record
// is a W4A8 layer's: its scale bytes are the blocks' shift codes (fp8_decode.cuh); `tables`: the
// shared-window address of the block's fp8_entry_table array.
template <int kRows, int kN, bool kShuffledDesc, class Between>
__device__ __forceinline__ void wgmma_fp8_chunk(uint32_t act, const uint8_t* record, int lane, uint32_t tables,
                                                float (&acc)[kRows / 2], Between&& between) {
  static_assert(kN <= kRows, "the instruction's rows are the block's first");
  float(&d)[kN / 2] = *reinterpret_cast<float(*)[kN / 2]>(&acc);
  kernels::Fp8Table t_lo, t_hi;
  lane_fp8_tables(record, lane, tables, t_lo, t_hi);
  const uint32_t desc0 =
      kShuffledDesc ? kernels::wgmma_desc_sw128_low_uniform(act) : kernels::wgmma_desc_sw128_low(act);
  uint32_t wl[4], wh[4];
  load_lane_words(record, lane, wl, wh);
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    kernels::wgmma_wait<1>();
    uint32_t a_lo, b_lo, a_hi, b_hi;
    kernels::decode_e2m1x8_e4m3(wl[w], t_lo, a_lo, b_lo);
    kernels::decode_e2m1x8_e4m3(wh[w], t_hi, a_hi, b_hi);
    kernels::wgmma_fence();
    // K step w: 32 bytes of each line, w * 32 bytes in (the descriptor's address field counts 16 bytes).
    kernels::wgmma_rs_e4m3<kN>(d, a_lo, a_hi, b_lo, b_hi, kernels::wgmma_desc_sw128_from_low(desc0 + 2 * w));
    kernels::wgmma_commit();
    between(w);
  }
}

}  // namespace
}  // namespace mxmoe::sm90
