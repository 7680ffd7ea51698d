#pragma once
// The block of either wgmma family (wgmma_gemm_kernel.cu, wgmma_fp8_gemm_kernel.cu, through their tile
// headers): its start, where thread 0 prefetches the launch's tensor maps and initialises the ring's
// barriers, and a lane's record words of a chunk. Each family's shape names its warps (one 16-row weight
// tile each): the bf16 block's in wgmma_tile.cuh, Fp8Shape's in wgmma_fp8_tile.cuh.
#include <cuda.h>

#include <cstdint>

#include "kernels/common/bulk_copy.cuh"
#include "kernels/common/tma.cuh"
#include "kernels/sm90/narrow_paths.cuh"
#include "kernels/sm90/wgmma_gemm.hpp"
#include "layout/gemv_layout.hpp"

namespace mxmoe::sm90 {
namespace {

constexpr int kLineBytes = 128;  // one 128-byte swizzle line of a stage's activations

}  // namespace

// The lane's 8 words of its warp's record (words 0..3 of its MX block in rows g and g+8: wl and wh) in
// two 16-byte loads, issued before the chunk's first wgmma wait so that no word's load latency sits
// between a wait and its decode (2-3% at T = 1024 to 4096 on an H200, bf16 tiles; 8 registers).
__device__ __forceinline__ void load_lane_words(const uint8_t* record, int lane, uint32_t (&wl)[4], uint32_t (&wh)[4]) {
  const uint8_t* data = record + gemv::lane_data_offset(lane);
  const uint4 lo = *reinterpret_cast<const uint4*>(data);
  const uint4 hi = *reinterpret_cast<const uint4*>(data + gemv::kRecordHalfBytes);
  wl[0] = lo.x, wl[1] = lo.y, wl[2] = lo.z, wl[3] = lo.w;
  wh[0] = hi.x, wh[1] = hi.y, wh[2] = hi.z, wh[3] = hi.w;
}

// Thread 0's part: the maps (the weights', `extra` unless null, the activations' and the narrower
// paths'), and the ring's barriers: full[s] completes on one arrival and the stage's copies, empty[s] on
// one arrival per warp. `Maps` holds weights, act and act_narrow[S::kNarrowPaths].
template <class S, int kStages, class Maps>
__device__ __forceinline__ void init_ring(const Maps& maps, const CUtensorMap* extra, uint64_t (&full)[kStages],
                                          uint64_t (&empty)[kStages], uint32_t warps) {
  kernels::tma_prefetch_map(&maps.weights);
  if (extra != nullptr) kernels::tma_prefetch_map(extra);
  kernels::tma_prefetch_map(&maps.act);
#pragma unroll
  for (int p = 0; p < S::kNarrowPaths; ++p) kernels::tma_prefetch_map(&maps.act_narrow[p]);
  for (int s = 0; s < kStages; ++s) {
    kernels::mbarrier_init(&full[s], 1);
    kernels::mbarrier_init(&empty[s], warps);
  }
  kernels::fence_barrier_init();
}

// A chunk's place in the ring: its stage and the parity of that stage's phase.
struct RingSlot {
  int stage;
  uint32_t parity;
};
// The slot of chunk c - 1, for chunk c in `stage` at `parity` (the stage before, one phase back across 0).
template <int kStages>
__device__ __forceinline__ RingSlot previous_slot(int stage, uint32_t parity) {
  return stage == 0 ? RingSlot{kStages - 1, parity ^ 1u} : RingSlot{stage - 1, parity};
}

// The main loop of either family: f(n, c, stage, parity) for chunks c = 0 .. chunks - 1 of a ring of kStages
// stages, n the m-tile path's width (std::integral_constant, with_path_width), chunk c in stage c % kStages
// at barrier parity (c / kStages) & 1. kStages chunks an iteration, chunk c0 + j in stage j: the stage and
// barrier addresses are then constants, and the path's branch and the lane's record offsets are paid once
// per kStages chunks. One chunk an iteration, ptxas had rebuilt them from the thread and chunk index at
// every chunk: about a quarter of the 64-row W4A8 tile's instructions a chunk. A/Bs on an H200 (gpt-oss-120b):
// W4A8 T = 64 500-507 -> 462 us, 1024 699-700 -> 671, 4096 1369-1370 -> 1292-1299 (docs/fp8.md); bf16
// T = 512 709 -> 696 (the 32-row tile, whose wgmmas ptxas then serialises, C7511, and is still faster), 1024
// 801-813 -> 745-747, 4096 1989-1992 -> 1976-1978 (docs/perf/wgmma.md).
template <int kStages, class S, class F>
__device__ __forceinline__ void for_each_ring_chunk(int chunks, int path, F&& f) {
  for (int c0 = 0; c0 < chunks; c0 += kStages) {
    const uint32_t parity = static_cast<uint32_t>(c0 / kStages) & 1u;
    with_path_width<S>(path, [&](auto n) {
#pragma unroll
      for (int j = 0; j < kStages; ++j) {
        if (c0 + j >= chunks) break;
        f(n, c0 + j, j, parity);
      }
    });
  }
}

}  // namespace mxmoe::sm90
