#pragma once
// The wgmma tiles' shapes and device steps (wgmma_gemm_kernel.cu, whose opening comment describes the
// family): the block shape per tile height, the stage copies, the K steps of the warpgroup MMA and the
// epilogue helpers. Included by that one translation unit only (its names are internal to it).
#include <cuda_bf16.h>

#include <string_view>
#include <type_traits>

#include "kernels/common/cp_async.cuh"
#include "common/pdl_launch.cuh"
#include "kernels/common/static_smem.hpp"
#include "kernels/common/tensor_map.hpp"
#include "kernels/common/wgmma.cuh"
#include "layout/gemv_layout.hpp"
#include "kernels/mma/bf16_atom.cuh"
#include "kernels/mma/m_tile_rows.cuh"
#include "kernels/mma/swap_epilogue.cuh"
#include "kernels/sm90/chunk_order.hpp"
#include "kernels/sm90/narrow_paths.cuh"
#include "kernels/sm90/sm90_host.hpp"
#include "kernels/sm90/wgmma_block.cuh"
#include "kernels/sm90/wgmma_gemm.hpp"
#include "kernels/sm90/wgmma_stage.cuh"
#include "common/cuda_check.hpp"
#include "common/m_tiles.cuh"

namespace mxmoe::sm90 {
namespace {

// The bf16 block: 16 warps, one 16-row weight tile each (the FP8 tiles' own: Fp8Shape).
constexpr int kWarps = kBlockWarps;
constexpr int kThreads = kWarps * 32;
constexpr int kTiles = kWarps;
static_assert(kTiles * gemv::kTileRows == kBlockWeightRows, "a 16-row weight tile per warp");

template <int kRows>
struct WgShape {
  static_assert(kRows % 8 == 0, "whole 8-row swizzle groups");
  static constexpr int kWarps = kBlockWarps;  // one 16-row weight tile each
  static constexpr int kHalfBytes = kRows * kLineBytes;  // 64 of K, every row
  static constexpr int kActBytes = 2 * kHalfBytes;
  static constexpr int kStageBytes = (kActBytes + kTiles * gemv::kChunkBytes + 1023) / 1024 * 1024;
  // The 32- and 64-row tiles run two blocks per SM, 32 warps to hide the latency of each warp's chain
  // (shared-memory words, decode, wgmma) at 64 registers a thread; one block of the 128-row tile. At 64
  // registers ptxas serialises the 64-row tile's wgmmas (C7511: its 32 accumulators leave no room for a
  // queued group), but the SM's 8 warpgroups hide that: on an H100, one block of it per SM took 920 us
  // of gpt-oss-120b's layer at T = 1024, two 860 (docs/perf-log.md).
  static constexpr int kBlocksPerSm = kRows <= 64 ? 2 : 1;
  // Ring stages: four (197 KB at 128 rows, 101 KB at 32), three for the 64-row tile, whose two blocks
  // fit an SM only so (2 x 102 KB); six for the 64-row tile at one block per SM were slower on an H200.
  static constexpr int kStages = kRows == 64 ? 3 : 4;
  static constexpr int kSmemBytes = kStages * kStageBytes + 1024;  // + the base's alignment to 1024
  // The narrower wgmmas of m-tiles with fewer rows, narrowest first, each loading only the rows it
  // reads: in the 64-row tile every multiple of 8 from 24 (gpt-oss-120b has 32 +- 6 rows per expert at
  // T = 1024, 24 +- 5 at 768, 48 +- 7 at 1536; at a power-capped H100's T = 1024 the 40-row path alone,
  // with 32 and 48, took 889-894 -> 867-873 us: fewer wasted MMAs and loaded rows, less energy); half
  // the width in the 128-row tile; none in the 32-row tile. More paths in the 128-row tile (a quarter
  // or three quarters) or in the 32-row tile made ptxas serialise their wgmmas for want of registers.
  static constexpr int kNarrowPaths = kRows == 64 ? 5 : kRows == 128 ? 1 : 0;
  static constexpr int narrow_n(int path) { return kRows == 64 ? 24 + 8 * path : kRows / 2; }
  // The width of a path: a narrower one's, or the tile's (path kNarrowPaths).
  static constexpr int path_n(int path) { return path < kNarrowPaths ? narrow_n(path) : kRows; }
  static_assert(kNarrowPaths <= kMaxNarrowPaths, "WgmmaMaps holds a map per narrower path");
  static_assert(kNarrowPaths == 0 || (narrow_n(kNarrowPaths - 1) < kRows && narrow_n(0) % 8 == 0),
                "narrower paths are narrower, in whole 8-row swizzle groups");
};

#if MXMOE_HAS_WGMMA
__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
#endif

// Where K step s (0..7) of a chunk starts in its stage, in the descriptor's address field (bytes >> 4):
// (s / 4) activation halves and (s % 4) * 32 bytes in. The half chunk's steps are 0..3.
template <int kRows>
__device__ __forceinline__ uint32_t step_offset(int s) {
  return static_cast<uint32_t>((s >> 2) * WgShape<kRows>::kHalfBytes + (s & 3) * 32) >> 4;
}

// One group of two K steps from one decoded word of rows g and g+8 (wgmma_chunk and wgmma_half_chunk):
// all groups but the last are retired first (wgmma_chunk says why), then the word's pairs 0, 1 are the
// A fragment of the wgmma at `desc_a` and pairs 2, 3 that of the one at `desc_b`, committed as one group.
template <class Atom, int kN>
__device__ __forceinline__ void wgmma_word_group(float (&d)[kN / 2], uint32_t word_lo, uint32_t word_hi,
                                                 typename Atom::Scale s_lo, typename Atom::Scale s_hi, uint64_t desc_a,
                                                 uint64_t desc_b) {
  kernels::wgmma_wait<1>();
  uint32_t lo[4], hi[4];  // rows g and g+8: pairs (3,7), (2,6), (1,5), (0,4) of the word
  Atom::decode(word_lo, s_lo, lo);
  Atom::decode(word_hi, s_hi, hi);
  kernels::wgmma_fence();
  kernels::wgmma_rs_bf16<kN>(d, lo[0], hi[0], lo[1], hi[1], desc_a);
  kernels::wgmma_rs_bf16<kN>(d, lo[2], hi[2], lo[3], hi[3], desc_b);
  kernels::wgmma_commit();
}

// One chunk of one warpgroup: the warp's tile record decoded word by word, each word's two K steps
// one wgmma of N = kN (the block's first kN rows, kN <= kRows) each, one group per word. Before word
// w, all groups but the last are retired (at most one stays queued behind the one issued next), so
// the registers of word w - 2 can take word w and ptxas keeps the wgmmas asynchronous (two queued
// groups need more registers than 16 warps have, and ptxas then serialises them). `act`: the stage's
// activations (shared-memory address). After group w is issued, between(w) runs under its MMAs (the
// next chunk's loads). A warp whose tile is past the GEMM's last decodes whatever its unloaded record
// holds: its A rows only reach its own accumulator rows, which are never stored.
template <class Atom, int kRows, int kN, class Between>
__device__ __forceinline__ void wgmma_chunk(uint32_t act, const uint8_t* record, int lane, float (&acc)[kRows / 2],
                                            Between&& between) {
  static_assert(kN <= kRows, "the instruction's rows are the block's first");
  float(&d)[kN / 2] = *reinterpret_cast<float(*)[kN / 2]>(&acc);
  const uint32_t sc = *reinterpret_cast<const uint16_t*>(record + gemv::lane_scale_offset(lane));
  const typename Atom::Scale s_lo = Atom::scale(sc & 0xFFu), s_hi = Atom::scale(sc >> 8);
  // K step s's descriptor: the stage's, plus step_offset(s).
  const uint32_t desc0 = kernels::wgmma_desc_sw128_low_uniform(act);
  uint32_t wl[4], wh[4];
  load_lane_words(record, lane, wl, wh);
  const auto desc = [&](int s) { return kernels::wgmma_desc_sw128_from_low(desc0 + step_offset<kRows>(s)); };
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    wgmma_word_group<Atom, kN>(d, wl[w], wh[w], s_lo, s_hi, desc(2 * w), desc(2 * w + 1));
    between(w);
  }
}

// The half chunk (chunk_order.hpp: K % 128 == 64, the last chunk holds two MX blocks): 4 K steps, lane
// (g, q) decoding words 2 (q % 2) and 2 (q % 2) + 1 of block q / 2, two groups of two wgmmas over the
// stage's first activation half. `record`: where the warp's whole record would start (its run sits at
// kHalfRunStart of it). between(0) and between(1) run under the groups, as in wgmma_chunk.
template <class Atom, int kRows, int kN, class Between>
__device__ __forceinline__ void wgmma_half_chunk(uint32_t act, const uint8_t* record, int lane,
                                                 float (&acc)[kRows / 2], Between&& between) {
  static_assert(kN <= kRows, "the instruction's rows are the block's first");
  float(&d)[kN / 2] = *reinterpret_cast<float(*)[kN / 2]>(&acc);
  const int g = lane >> 2, block = (lane & 3) >> 1;
  const uint32_t sc = *reinterpret_cast<const uint16_t*>(record + gemv::record_scale_offset(g, block, 0));
  const typename Atom::Scale s_lo = Atom::scale(sc & 0xFFu), s_hi = Atom::scale(sc >> 8);
  const uint32_t desc0 = kernels::wgmma_desc_sw128_low_uniform(act);
  const uint8_t* data = record + gemv::record_data_offset(g, block, 0) + 8 * (lane & 1);
  const uint2 words_lo = *reinterpret_cast<const uint2*>(data);
  const uint2 words_hi = *reinterpret_cast<const uint2*>(data + gemv::kRecordHalfBytes);
  const uint32_t wl[2] = {words_lo.x, words_lo.y};
  const uint32_t wh[2] = {words_hi.x, words_hi.y};
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    wgmma_word_group<Atom, kN>(d, wl[j], wh[j], s_lo, s_hi,
                               kernels::wgmma_desc_sw128_from_low(desc0 + step_offset<kRows>(2 * j)),
                               kernels::wgmma_desc_sw128_from_low(desc0 + step_offset<kRows>(2 * j + 1)));
    between(j);
  }
}

}  // namespace
}  // namespace mxmoe::sm90
