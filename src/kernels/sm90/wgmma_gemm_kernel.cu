// The wgmma tiles (wgmma_gemm.hpp).
//
// K step s (0..7) of a chunk: warp i's lane (g, q) decodes word w = s / 2 of rows g and g+8 of its
// tile (MX block q of the chunk) into 4 bf16 pairs each, and pairs 2h, 2h+1 (h = s % 2) are its A
// fragment: a0 = row g pair 2h, a1 = row g+8 pair 2h, a2 = row g pair 2h+1, a3 = row g+8 pair 2h+1.
// The staged activations hold, in chunk order, exactly those elements at the K slots 2q.. and 2q+8..
// of step s (chunk_order.hpp), so one wgmma per step multiplies them with no permute.
//
// Shared memory per stage: the activations in two 128-byte-swizzled halves of K (rows x 128 bytes
// each, 1024-byte aligned), then the 16 weight records (wgmma_stage.cuh loads both). A chunk's 8
// wgmmas per warpgroup are 4 groups, one per decoded word; the last of them are retired while the next
// chunk is issued (wgmma_chunk), so a warp releases a stage during the next chunk (the 32-row tile, after
// its word 1) or at the next chunk's end (the 64- and 128-row tiles: kLateRelease in the kernel).
//
// When K % 128 == 64 (gpt-oss: K = 2880 = 22.5 chunks) the last chunk is a half chunk (chunk_order.hpp):
// its stage holds only the first activation half and each tile's run of two blocks (wgmma_stage.cuh),
// and it runs 4 wgmmas instead of 8 (wgmma_half_chunk), so no copy, decode or MMA touches the padding:
// 2.2% of the weight bytes and of the work at K = 2880.
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
#include "kernels/sm90/wgmma_gemm.hpp"
#include "kernels/sm90/wgmma_stage.cuh"
#include "common/cuda_check.hpp"
#include "common/m_tiles.cuh"

namespace mxmoe::sm90 {
namespace {

constexpr int kWarps = 16;
constexpr int kThreads = kWarps * 32;
constexpr int kTiles = kWarps;  // one 16-row weight tile per warp
static_assert(kTiles * gemv::kTileRows == kBlockWeightRows, "a 16-row weight tile per warp");
constexpr int kLineBytes = 128;  // one swizzle line: 64 bf16 of K

template <int kRows>
struct WgShape {
  static_assert(kRows % 8 == 0, "whole 8-row swizzle groups");
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

// The narrowest path of WgShape S whose width covers `rows`.
template <class S>
__device__ __forceinline__ int narrowest_path(int rows) {
  int path = S::kNarrowPaths;
#pragma unroll
  for (int p = S::kNarrowPaths - 1; p >= 0; --p)
    if (rows <= S::narrow_n(p)) path = p;
  return path;
}

// f(std::integral_constant<int, N>) with N the width of `path` (a branch per narrower path).
template <class S, int kPath = 0, class F>
__device__ __forceinline__ void with_path_width(int path, F&& f) {
  if constexpr (kPath < S::kNarrowPaths)
    if (path != kPath) return with_path_width<S, kPath + 1>(path, f);
  f(std::integral_constant<int, S::path_n(kPath)>{});
}

#if MXMOE_HAS_WGMMA
__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
#endif

// The wgmma of N = kN (24 to 64 in steps of 8, or 128).
template <int kN>
__device__ __forceinline__ void wgmma_rs(float (&d)[kN / 2], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint64_t desc) {
  if constexpr (kN == 128)
    kernels::wgmma_m64n128k16_bf16_rs(d, a0, a1, a2, a3, desc);
  else if constexpr (kN == 64)
    kernels::wgmma_m64n64k16_bf16_rs(d, a0, a1, a2, a3, desc);
  else if constexpr (kN == 56)
    kernels::wgmma_m64n56k16_bf16_rs(d, a0, a1, a2, a3, desc);
  else if constexpr (kN == 48)
    kernels::wgmma_m64n48k16_bf16_rs(d, a0, a1, a2, a3, desc);
  else if constexpr (kN == 40)
    kernels::wgmma_m64n40k16_bf16_rs(d, a0, a1, a2, a3, desc);
  else if constexpr (kN == 32)
    kernels::wgmma_m64n32k16_bf16_rs(d, a0, a1, a2, a3, desc);
  else
    kernels::wgmma_m64n24k16_bf16_rs(d, a0, a1, a2, a3, desc);
}

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
  wgmma_rs<kN>(d, lo[0], hi[0], lo[1], hi[1], desc_a);
  wgmma_rs<kN>(d, lo[2], hi[2], lo[3], hi[3], desc_b);
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
  // The lane's 8 words (rows g and g+8) in two 16-byte loads before the first wait, so no word's load
  // latency sits between a wait and its decode (2-3% at T = 1024 to 4096 on an H200; 8 registers).
  const uint8_t* data = record + gemv::lane_data_offset(lane);
  const uint4 words_lo = *reinterpret_cast<const uint4*>(data);
  const uint4 words_hi = *reinterpret_cast<const uint4*>(data + gemv::kRecordHalfBytes);
  const uint32_t wl[4] = {words_lo.x, words_lo.y, words_lo.z, words_lo.w};
  const uint32_t wh[4] = {words_hi.x, words_hi.y, words_hi.z, words_hi.w};
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

template <bool kGemm1, bool kWideScales, int kRows>
__global__ void __launch_bounds__(kThreads, WgShape<kRows>::kBlocksPerSm)
    wgmma_gemm_kernel(const mma::MmaArgs a, const __grid_constant__ WgmmaMaps maps) {
#if MXMOE_HAS_WGMMA
  using S = WgShape<kRows>;
  using Atom = mma::Bf16Atom<kWideScales>;
  // Chunk c + kAhead is requested during chunk c, into chunk c - 1's stage once every warp has retired
  // that chunk's wgmmas (the `empty` barriers), so kStages - 1 chunks are in flight while one is computed.
  constexpr int kStages = S::kStages;
  constexpr int kAhead = kStages - 1;
  constexpr bool kLateRelease = S::kBlocksPerSm == 1;
  // The epilogue's inputs, requested before the main loop, not after it (a memory round trip on every
  // block's tail: 1-2% of gpt-oss-120b's layer at T = 768 to 1024 on an H100): each warp's 16 bias rows,
  // and GEMM2's routing weight per row. Not in the 128-row tile, whose wgmmas ptxas then serialises for
  // want of registers (C7512).
  constexpr bool kStagedEpilogue = kRows <= 64;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  __shared__ routing::MTile tile;
  __shared__ __align__(8) uint64_t full[kStages];   // a stage's records and activations have landed
  __shared__ __align__(8) uint64_t empty[kStages];  // every warp is done with a stage
  __shared__ __align__(16) uint16_t bias_rows[kWarps][gemv::kTileRows];
  __shared__ float row_weights[kGemm1 ? 1 : kRows];
  // The swizzle is a function of the address bits: each stage's lines start 1024-byte aligned.
  uint8_t* smem = smem_raw + ((1024 - (smem_address(smem_raw) & 1023)) & 1023);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  // Blocks in m-tile-major order: the weight blocks of one m-tile run side by side, so its rows'
  // activations are read from memory once and then hit L2 (GEMM2's intermediate outgrows L2 at large
  // T: in weight-block-major order each of its m-tiles was read once per weight block).
  const int weight_blocks = (a.tiles + kTiles - 1) / kTiles;
  const int m_tile = static_cast<int>(blockIdx.x) / weight_blocks, weight_block = static_cast<int>(blockIdx.x) % weight_blocks;
  const int tile0 = weight_block * kTiles;
  const int my_tile = tile0 + warp;
  const bool producer = threadIdx.x == 0;
  if (producer) {
    kernels::tma_prefetch_map(&maps.weights);
    if (a.half_tail) kernels::tma_prefetch_map(&maps.weights_half);
    kernels::tma_prefetch_map(&maps.act);
    // The narrower paths' maps only where the tile has those paths (launch_wgmma leaves the others zero).
#pragma unroll
    for (int p = 0; p < S::kNarrowPaths; ++p) kernels::tma_prefetch_map(&maps.act_narrow[p]);
    for (int s = 0; s < kStages; ++s) {
      kernels::mbarrier_init(&full[s], 1);
      kernels::mbarrier_init(&empty[s], kWarps);
    }
    kernels::fence_barrier_init();
  }
  // No per-row sources: the activations are in sorted row order, copied from the m-tile's first row.
  if (!mma::find_block_m_tile<kRows>(a, m_tile, tile)) return;
  const int expert = tile.expert;
  const int expert_tile0 = expert * a.tiles + tile0;
  // The narrowest wgmma that covers the m-tile's rows (WgShape: an expert's last m-tile is often
  // nearly empty, gpt-oss-120b at T = 4096 has about 128 +- 11 rows per expert; at T = 1024, 32 +- 6).
  // Its stages hold only the rows it reads.
  const int path = narrowest_path<S>(tile.rows);
  const CUtensorMap* act_map = path < S::kNarrowPaths ? &maps.act_narrow[path] : &maps.act;
  const uint32_t act_box_bytes = static_cast<uint32_t>(S::path_n(path)) * kLineBytes;
  // The last chunk is a half chunk when K % 128 == 64 (MmaArgs::half_tail).
  const int whole_chunks = a.half_tail ? a.chunks - 1 : a.chunks;
  auto load = [&](int c) {
    const int stage = c % kStages;
    if (c < whole_chunks)
      load_stage<S::kHalfBytes, kTiles>(smem + stage * S::kStageBytes, maps, act_map, act_box_bytes, c, expert_tile0,
                                        tile.row0, &full[stage]);
    else
      load_half_stage<S::kHalfBytes, kTiles>(smem + stage * S::kStageBytes, maps, act_map, act_box_bytes, c,
                                             expert_tile0, tile.row0, &full[stage]);
  };
  if (producer)
    for (int c = 0; c < kAhead && c < a.chunks; ++c) load(c);
  // The epilogue's inputs (kStagedEpilogue; launch_wgmma checks the bias's 16-byte alignment and that N
  // is whole tiles). Warp 15's routing weights delay its first chunk by two loads' latency, under the
  // first stage's.
  if constexpr (kStagedEpilogue) {
    if (my_tile < a.tiles && lane < 2)  // zeros without a bias
      kernels::cp_async_16(&bias_rows[warp][lane * 8],
                           a.bias ? a.bias + static_cast<int64_t>(expert) * a.n + my_tile * gemv::kTileRows + lane * 8
                                  : a.act,
                           a.bias != nullptr);
    kernels::cp_async_commit();
    if (!kGemm1 && warp == kWarps - 1)
      for (int r = lane; r < tile.rows; r += 32) row_weights[r] = a.pair_weights[a.row_pair[tile.row0 + r]];
  }

  // The warpgroup runs when its first tile exists (its other warps then multiply whatever their
  // records hold, into accumulator rows that are never stored: wgmma_chunk).
  const bool group_active = tile0 + (warp & ~3) < a.tiles;
  float acc[kRows / 2] = {};

  // Chunk c, a whole one or (kHalf) the half chunk.
  auto run_chunk = [&](int c, auto half) {
    constexpr bool kHalf = decltype(half)::value;
    const int stage = c % kStages;
    kernels::mbarrier_wait_parity(&full[stage], static_cast<uint32_t>(c / kStages) & 1u);
    // Chunk c - 1's wgmma groups are all retired after word 1's wait: then its stage is released, and the
    // producer refills it with chunk c + kAhead once every warp has (a warp arrives only after waiting
    // for chunk c, which the producer requested after the previous phase of that stage completed, so no
    // arrival lands in the wrong phase). The 128-row tile does both after the chunk's last group
    // (kLateRelease), out of the wgmma sequence; with a branch between the groups ptxas rebuilds every
    // wgmma descriptor from scratch, about 15% of the chunk's instructions. The tiles at two blocks per
    // SM release within the chunk: moved out, the 32-row tile's 64 registers no longer keep the wgmmas
    // asynchronous (C7512), and the 64-row tile's ring is one chunk shorter.
    auto release = [&] {
      if (lane == 0 && c > 0) kernels::mbarrier_arrive(&empty[(c - 1) % kStages]);
    };
    auto refill = [&] {
      if (producer && c + kAhead < a.chunks) {
        if (c > 0) kernels::mbarrier_wait_parity(&empty[(c - 1) % kStages], static_cast<uint32_t>((c - 1) / kStages) & 1u);
        load(c + kAhead);
      }
    };
    auto between = [&](int w) {
      if constexpr (!kLateRelease) {
        if (w == 1) release();
        if (w == 3) refill();
      }
    };
    const uint8_t* st = smem + stage * S::kStageBytes;
    if (group_active) {
      if constexpr (kHalf) {
        const uint8_t* record = st + S::kActBytes + warp * kHalfRunBytes - kHalfRunStart;
        // The last chunk: between(0) and between(1) inside release chunk c - 1's stage; nothing is left
        // to refill.
        with_path_width<S>(path, [&](auto n) {
          wgmma_half_chunk<Atom, kRows, decltype(n)::value>(smem_address(st), record, lane, acc, between);
        });
      } else {
        const uint8_t* record = st + S::kActBytes + warp * gemv::kChunkBytes;
        with_path_width<S>(path, [&](auto n) {
          wgmma_chunk<Atom, kRows, decltype(n)::value>(smem_address(st), record, lane, acc, between);
        });
      }
    } else {
      __syncwarp();
#pragma unroll
      for (int w = 0; w < 4; ++w) between(w);
    }
    if constexpr (kLateRelease) {
      release();
      refill();
    }
  };
  for (int c = 0; c < whole_chunks; ++c) run_chunk(c, std::false_type{});
  // The half chunk runs in a branch: every wgmma is retired on both of its sides, so ptxas sees no
  // accumulator moved while one is in flight (which would serialise every wgmma of the kernel, C7515).
  kernels::wgmma_wait<0>();
  kernels::wgmma_fence_operands(acc);
  if (whole_chunks < a.chunks) {
    run_chunk(whole_chunks, std::true_type{});
    kernels::wgmma_wait<0>();
    kernels::wgmma_fence_operands(acc);
  }
  if constexpr (kStagedEpilogue) {
    kernels::cp_async_wait<0>();
    __syncthreads();  // the routing weights staged by another warp
  }

  const int64_t pitch = padded_k(a.n / 2);
  if (kGemm1 && weight_block == weight_blocks - 1) {
    // The intermediate's padding past I (in its last chunk): zeros, which GEMM2 multiplies with the
    // zero weights of its records' blocks past K.
    const int features = a.n / 2, pad = static_cast<int>(pitch) - features;
    for (int i = threadIdx.x; i < tile.rows * pad; i += kThreads)
      static_cast<uint16_t*>(a.out)[(tile.row0 + i / pad) * pitch + row_position(features + i % pad, features)] = 0;
  }
  if (my_tile >= a.tiles) return;
  const float(&acc_tiles)[1][kRows / 8][4] = *reinterpret_cast<const float(*)[1][kRows / 8][4]>(&acc);
  const mma::EpilogueArgs epilogue{a.bias, a.n, a.row_pair, a.pair_weights, a.out, a.alpha, a.limit};
  auto gemm1_index = [pitch, features = a.n / 2](int64_t row, int f) { return row * pitch + row_position(f, features); };
  if constexpr (kStagedEpilogue)
    mma::store_swap_rows<kGemm1>(epilogue, acc_tiles, tile.row0, tile.rows, my_tile, 0, g, t, gemm1_index,
                                 [my_bias = bias_rows[warp]](int, int j) { return mma::bf16_at(my_bias + j); },
                                 [](int r) { return row_weights[kGemm1 ? 0 : r]; });
  else
    mma::store_swap_rows<kGemm1>(epilogue, acc_tiles, expert, tile.row0, tile.rows, my_tile, 0, g, t, gemm1_index);
#else
  (void)a;
  __trap();
#endif
}

template <class F>
void for_each_variant(F&& f) {
#if !defined(MXMOE_MINIMAL)
  f(wgmma_gemm_kernel<true, false, 32>, 32);
  f(wgmma_gemm_kernel<true, true, 32>, 32);
  f(wgmma_gemm_kernel<false, false, 32>, 32);
  f(wgmma_gemm_kernel<false, true, 32>, 32);
  f(wgmma_gemm_kernel<true, false, 64>, 64);
  f(wgmma_gemm_kernel<true, true, 64>, 64);
  f(wgmma_gemm_kernel<false, false, 64>, 64);
  f(wgmma_gemm_kernel<false, true, 64>, 64);
  f(wgmma_gemm_kernel<true, false, 128>, 128);
  f(wgmma_gemm_kernel<true, true, 128>, 128);
  f(wgmma_gemm_kernel<false, false, 128>, 128);
  f(wgmma_gemm_kernel<false, true, 128>, 128);
#else
  (void)f;
#endif
}

}  // namespace

bool wgmma_built() {
#if defined(MXMOE_MINIMAL)
  return false;
#else
  return true;
#endif
}

bool wgmma_rows_supported(int rows) { return wgmma_built() && (rows == 32 || rows == 64 || rows == 128); }

namespace {
// f(std::integral_constant<int, R>) for the tile of `rows` rows: R = 32, 64, or 128 for any other count
// (launch_wgmma checks wgmma_rows_supported first). The one place a run-time row count picks a tile.
template <class F>
decltype(auto) with_tile_rows(int rows, F&& f) {
  if (rows == 32) return f(std::integral_constant<int, 32>{});
  if (rows == 64) return f(std::integral_constant<int, 64>{});
  return f(std::integral_constant<int, 128>{});
}
}  // namespace

size_t wgmma_smem_bytes(int rows) {
  return with_tile_rows(rows, [](auto r) { return size_t{WgShape<decltype(r)::value>::kSmemBytes}; });
}

// Whether the build's architectures include sm_90a (MXMOE_CUDA_ARCHS, e.g. "90a,120a,121a"): plain
// sm_90 code has no wgmma, and there the kernels are trap stubs.
static bool built_for_sm90a() {
  const std::string_view archs = MXMOE_CUDA_ARCHS;
  for (size_t at = archs.find("90a"); at != std::string_view::npos; at = archs.find("90a", at + 1))
    if (at == 0 || archs[at - 1] == ',') return true;
  return false;
}

bool wgmma_in_build() { return wgmma_built() && built_for_sm90a(); }

bool wgmma_runs(int device) {
  if (!wgmma_in_build()) return false;
  int major = 0, minor = 0, optin = 0;
  MXMOE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  MXMOE_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  MXMOE_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  // wgmma is sm_90a only: Hopper, with the build's sm_90a image (checked above).
  if (major != 9 || minor != 0) return false;
  return kernels::variants_fit([](auto f) { for_each_variant(f); }, wgmma_smem_bytes, static_cast<size_t>(optin));
}

void configure_wgmma() {
  for_each_variant([&](auto kernel, int rows) {
    MXMOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(wgmma_smem_bytes(rows))));
    // All of the unified L1 as shared memory: without the hint the driver may keep a smaller split that a
    // previous kernel left, which fits one block of the 32- and 64-row tiles instead of two (on an H100,
    // gpt-oss-120b T = 1024 took 914 us after the GEMV sizes in one process, 848 without them).
    MXMOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                          cudaSharedmemCarveoutMaxShared));
  });
}

template <bool kGemm1>
void launch_wgmma(const mma::MmaArgs& a, int64_t tokens, int max_active, int rows, cudaStream_t stream) {
  MXMOE_REQUIRE(wgmma_rows_supported(rows), "wgmma: tiles have 32, 64 or 128 rows (not in the minimal profile), got ",
                rows);
  MXMOE_REQUIRE(a.k == padded_k(a.k) && a.k >= a.chunks * gemv::kChunkK,
                "wgmma: the activations' row length must be whole chunks covering K, got ", a.k);
  // TMA coordinates are 32-bit.
  MXMOE_REQUIRE(tokens * a.top_k < (int64_t{1} << 31), "wgmma: too many rows for the tensor maps: tokens ", tokens);
  if (tokens == 0 || max_active == 0) return;
  // The epilogue's bias rows arrive by 16-byte copies, a tile's 16 rows at a time.
  MXMOE_REQUIRE(a.n == a.tiles * gemv::kTileRows, "wgmma: N must be whole 16-row tiles, got ", a.n);
  MXMOE_REQUIRE(reinterpret_cast<uintptr_t>(a.bias) % 16 == 0, "wgmma: the bias must be 16-byte aligned");
  const unsigned m_blocks = mma::m_tile_blocks(a, tokens, max_active, rows);
  const int64_t blocks = static_cast<int64_t>(m_blocks) * ((a.tiles + kTiles - 1) / kTiles);
  MXMOE_REQUIRE(blocks < (int64_t{1} << 31), "wgmma: too many blocks (", blocks, ")");
  WgmmaMaps maps{};  // the maps a tile never reads (WgShape's narrower paths) stay zero and unprefetched
  // Also checks that the experts lie back to back.
  maps.weights = kernels::encode_record_map("wgmma weights", a, kRecordWords, kTiles);
  if (a.half_tail)
    maps.weights_half = kernels::encode_record_map("wgmma weights (half chunk)", a, kHalfRunWords, kTiles);
  const uint64_t act_dims[] = {static_cast<uint64_t>(a.k), static_cast<uint64_t>(tokens * a.top_k)};
  const uint64_t act_strides[] = {static_cast<uint64_t>(a.k) * 2};
  auto act_map = [&](const char* what, int box_rows) {
    const uint32_t box[] = {kLineBytes / 2, static_cast<uint32_t>(box_rows)};
    return kernels::encode_tiled_map(what, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, a.act, act_dims, act_strides, box,
                                     CU_TENSOR_MAP_SWIZZLE_128B);
  };
  maps.act = act_map("wgmma activations", rows);
  const dim3 grid(static_cast<unsigned>(blocks));
  with_tile_rows(rows, [&](auto r) {
    constexpr int kRows = decltype(r)::value;
    using S = WgShape<kRows>;
    for (int p = 0; p < S::kNarrowPaths; ++p)
      maps.act_narrow[p] = act_map("wgmma activations (a narrower path's rows)", S::narrow_n(p));
    auto go = [&](auto kernel) {
      kernels::launch_with_pdl(kernel, grid, dim3(kThreads), size_t{S::kSmemBytes}, stream, a, maps);
    };
    a.wide_scales ? go(wgmma_gemm_kernel<kGemm1, true, kRows>) : go(wgmma_gemm_kernel<kGemm1, false, kRows>);
  });
}

template void launch_wgmma<true>(const mma::MmaArgs&, int64_t, int, int, cudaStream_t);
template void launch_wgmma<false>(const mma::MmaArgs&, int64_t, int, int, cudaStream_t);

}  // namespace mxmoe::sm90
