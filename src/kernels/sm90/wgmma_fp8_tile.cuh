#pragma once
// The FP8 wgmma tiles' shapes and device steps (wgmma_fp8_gemm_kernel.cu; the family:
// wgmma_fp8_gemm.hpp). Included by that one translation unit only (its names are internal to it).
#include <cuda.h>

#include <cstdint>

#include "common/cuda_check.hpp"
#include "common/m_tiles.cuh"
#include "common/pdl_launch.cuh"
#include "kernels/common/record_map.hpp"
#include "kernels/common/static_smem.hpp"
#include "kernels/common/tensor_map.hpp"
#include "kernels/common/tma.cuh"
#include "kernels/common/wgmma.cuh"
#include "kernels/common/wgmma_fp8.cuh"
#include "kernels/mma/m_tile_rows.cuh"
#include "kernels/mma/swap_epilogue.cuh"
#include "kernels/sm90/fp8_chunk_order.hpp"
#include "kernels/sm90/sm90_host.hpp"
#include "kernels/sm90/wgmma_fp8_gemm.hpp"
#include "kernels/sm90/wgmma_gemm.hpp"
#include "layout/fp8_decode.cuh"
#include "layout/gemv_layout.hpp"

namespace mxmoe::sm90 {
namespace {

constexpr int kWarps = 16;
constexpr int kThreads = kWarps * 32;
constexpr int kTiles = kWarps;  // one 16-row weight tile per warp
static_assert(kTiles * gemv::kTileRows == kBlockWeightRows, "a 16-row weight tile per warp");
constexpr int kLineBytes = 128;  // one swizzle line: a chunk's 128 e4m3 of one row

template <int kRows>
struct Fp8Shape {
  static_assert(kRows % 8 == 0, "whole 8-row swizzle groups");
  static constexpr int kActBytes = kRows * kLineBytes;  // the chunk's line of every row
  static constexpr int kWeightBytes = kTiles * gemv::kChunkBytes;
  static constexpr int kStageBytes = (kActBytes + kWeightBytes + 1023) / 1024 * 1024;
  // Two blocks per SM at 32 rows (64 registers a thread, as the bf16 tiles), one from 64: at two blocks
  // ptxas serialised the 64-row tile's wgmmas (C7512) and spilled 8 bytes; at one it uses 128 registers
  // with neither. Half the activation bytes of the bf16 stages leave room for 4 stages in every height.
  static constexpr int kBlocksPerSm = kRows <= 32 ? 2 : 1;
  static constexpr int kStages = 4;
  static constexpr int kSmemBytes = kStages * kStageBytes + 1024;  // + the base's alignment to 1024
};

// The descriptors of a launch (kernel parameter, __grid_constant__).
struct Fp8Maps {
  CUtensorMap weights;  // 3D: 136 x 8 bytes, chunks, experts x tiles; box {136, 1, 16}
  CUtensorMap act;      // 2D bytes: K padded to whole chunks, rows; box {128, rows}, 128-byte swizzle
};

#if MXMOE_HAS_WGMMA
__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
#endif

template <int kN>
__device__ __forceinline__ void wgmma_fp8(float (&d)[kN / 2], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                          uint64_t desc) {
  if constexpr (kN == 128)
    kernels::wgmma_m64n128k32_e4m3_rs(d, a0, a1, a2, a3, desc);
  else if constexpr (kN == 64)
    kernels::wgmma_m64n64k32_e4m3_rs(d, a0, a1, a2, a3, desc);
  else
    kernels::wgmma_m64n32k32_e4m3_rs(d, a0, a1, a2, a3, desc);
}

// Chunk c of the block's tiles (the first of them tile `expert_tile0` of the [experts x tiles] view)
// and of its m-tile (first row `row0`) into `stage`: the activation lines, then the 16 records. Rows past
// the tensor's read as zeros and still count in the transaction bytes.
template <int kRows>
__device__ __forceinline__ void load_fp8_stage(uint8_t* stage, const Fp8Maps& maps, int c, int expert_tile0, int row0,
                                               uint64_t* full) {
  using S = Fp8Shape<kRows>;
  kernels::mbarrier_arrive_expect_tx(full, S::kActBytes + S::kWeightBytes);
  kernels::tma_load_3d(stage + S::kActBytes, &maps.weights, 0, c, expert_tile0, full);
  kernels::tma_load_2d(stage, &maps.act, c * gemv::kChunkK, row0, full);
}

// One chunk of one warpgroup: the warp's record decoded word by word to e4m3 (fp8_decode.cuh), word w
// of MX block t of rows g and g+8 being K step w's A fragment (fp8_chunk_order.hpp), one wgmma of
// N = kRows per step, one group per step. Before step w all groups but the last are retired, so the
// fragments of step w - 2 are free and ptxas keeps the wgmmas asynchronous (the bf16 tiles' scheme,
// wgmma_tile.cuh). between(w) runs after group w is issued (the ring's release and refill). c_lo, c_hi:
// the row exponents of the lane's rows g and g+8.
template <int kRows, class Between>
__device__ __forceinline__ void wgmma_fp8_chunk(uint32_t act, const uint8_t* record, int lane, int c_lo, int c_hi,
                                                float (&acc)[kRows / 2], Between&& between) {
  const uint32_t sc = *reinterpret_cast<const uint16_t*>(record + gemv::lane_scale_offset(lane));
  const kernels::Fp8Table t_lo = kernels::fp8_table(sc & 0xFFu, c_lo), t_hi = kernels::fp8_table(sc >> 8, c_hi);
  __syncwarp();  // the tables' rare slow path diverges; the wgmmas below are .aligned
  const uint32_t desc0 = kernels::wgmma_desc_sw128_low_uniform(act);
  // The lane's 8 words (rows g and g+8) in two 16-byte loads before the first wait, as the bf16 tiles.
  const uint8_t* data = record + gemv::lane_data_offset(lane);
  const uint4 words_lo = *reinterpret_cast<const uint4*>(data);
  const uint4 words_hi = *reinterpret_cast<const uint4*>(data + gemv::kRecordHalfBytes);
  const uint32_t wl[4] = {words_lo.x, words_lo.y, words_lo.z, words_lo.w};
  const uint32_t wh[4] = {words_hi.x, words_hi.y, words_hi.z, words_hi.w};
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    kernels::wgmma_wait<1>();
    uint32_t a_lo, b_lo, a_hi, b_hi;
    kernels::decode_e2m1x8_e4m3(wl[w], t_lo, a_lo, b_lo);
    kernels::decode_e2m1x8_e4m3(wh[w], t_hi, a_hi, b_hi);
    kernels::wgmma_fence();
    // K step w: 32 bytes of each line, w * 32 bytes in (the descriptor's address field counts 16 bytes).
    wgmma_fp8<kRows>(acc, a_lo, a_hi, b_lo, b_hi, kernels::wgmma_desc_sw128_from_low(desc0 + 2 * w));
    kernels::wgmma_commit();
    between(w);
  }
}

}  // namespace
}  // namespace mxmoe::sm90
