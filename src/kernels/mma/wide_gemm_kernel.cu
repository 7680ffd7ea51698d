// The 128-row tensor-core tile (mma_gemm.hpp, m_tiles 8; Hopper only): 128 rows of one expert x 128
// weight rows x K in chunks of 128, 8 warps in a 2 (rows) x 4 (weight rows) grid, each warp 64 x 32.
//
// The register-decode tiles (mma_gemm_kernel.cu) decode each weight once per warp for 16-64 rows; at
// large T that decode, not the MMAs, fills the issue slots. Here each chunk's 128 x 128 weights are
// decoded once per block into shared memory as bf16 in natural K order (warp w decodes record w), and
// every warp then reads both operands with ldmatrix: the decode is paid once per 128 rows. Rows of
// both operands are 256 bytes, their 16-byte units swizzled by the row (swizzled()), so every
// ldmatrix phase and every cp.async lands in 8 different bank quads.
//
// Shared memory: 2 stages x (32 KB of activations + 8.5 KB of weight records) + 32 KB of decoded
// weights = 113 KB: one block per SM on Hopper. SM120/SM121 allow 99 KB per block, so the tile is
// not built for them (the planner only offers it where wide_fits() holds).
#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/common/cp_async.cuh"
#include "kernels/common/pdl_launch.cuh"
#include "kernels/common/static_smem.hpp"
#include "kernels/gemv/gemv_layout.hpp"
#include "kernels/mma/bf16_atom.cuh"
#include "kernels/mma/chunk_pipeline.cuh"
#include "kernels/mma/epilogue.cuh"
#include "kernels/mma/ldmatrix.cuh"
#include "kernels/mma/m_tile_rows.cuh"
#include "kernels/mma/mma_gemm.hpp"
#include "kernels/mma/weight_stage.cuh"
#include "moe/cuda_check.hpp"
#include "routing/m_tiles.cuh"

namespace mxmoe::mma {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kBM = block_m(kWideMTiles);                     // 128 rows of one expert
constexpr int kTiles = 8;                                     // GEMV weight tiles per block
constexpr int kBN = kTiles * gemv::kTileRows;                 // 128 weight rows
constexpr int kRowBytes = gemv::kChunkK * 2;                  // one chunk of bf16: 16 units of 16 bytes
constexpr int kActBytes = kBM * kRowBytes;                    // 32 KB
constexpr int kWeightBytes = kTiles * gemv::kChunkBytes;      // 8.5 KB
constexpr int kStageBytes = kActBytes + kWeightBytes;
constexpr int kStages = 2;
constexpr int kDecodedBytes = kBN * kRowBytes;                // 32 KB
constexpr int kSmemBytes = kStages * kStageBytes + kDecodedBytes;

// Byte offset of 16-byte unit u (0..15) of row r: unit u ^ (r % 8), so the 8 rows of an ldmatrix
// phase (same u) sit in 8 different bank quads.
__device__ __forceinline__ int swizzled(int r, int u) { return r * kRowBytes + ((u ^ (r & 7)) << 4); }

// A decoded word's pairs (3,7), (2,6), (1,5), (0,4) (Bf16Atom::decode) -> elements 0..7 in order.
__device__ __forceinline__ uint4 natural_order(const uint32_t (&p)[4]) {
  return make_uint4(__byte_perm(p[3], p[2], 0x5410), __byte_perm(p[1], p[0], 0x5410),
                    __byte_perm(p[3], p[2], 0x7632), __byte_perm(p[1], p[0], 0x7632));
}

template <bool kGemm1, bool kWideScales>
__global__ void __launch_bounds__(kThreads, 1) wide_gemm_kernel(const MmaArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
  __trap();  // not built beyond Hopper: 113 KB of shared memory (see the top of this file)
#else
  using Atom = Bf16Atom<kWideScales>;
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ routing::MTile tile;
  __shared__ int64_t src_row[kBM];  // element offset of each row's activations; -1: padding row
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  if (!begin_m_tile<kBM, kGemm1>(a, tile, src_row)) return;
  const int expert = tile.expert;
  const int tile0 = static_cast<int>(blockIdx.y) * kTiles;
  const uint8_t* weights = a.weights + expert * a.expert_stride;
  uint8_t* decoded = smem + kStages * kStageBytes;

  auto load_stage = [&](int stage, int c) {
    uint8_t* act = smem + stage * kStageBytes;
    load_act_chunk<kBM, kThreads>(a, src_row, c, [&](int r, int u) { return act + swizzled(r, u); });
    load_weight_records<kTiles, kThreads>(act + kActBytes, weights, tile0, a.tiles, a.chunks, c);
  };

  const int wm = warp >> 2, wn = warp & 3;  // rows [64 wm, +64), weight tiles 2 wn, 2 wn + 1
  // Warps without rows or weight tiles skip the MMAs but keep to the block's barriers.
  const bool warp_active = tile0 + 2 * wn < a.tiles && tile.rows > 64 * wm;
  float acc[4][2][2][4] = {};  // [m16 tile][weight tile][half: rows 0-7 / 8-15][fragment]

  run_chunk_pipeline<kStages>(a.chunks, load_stage, [&](int stage) {
    const uint8_t* act = smem + stage * kStageBytes;
    // Warp w decodes record w (tile tile0 + w): lane (g, t) holds block t of rows g and g+8 of the
    // tile (gemv_layout.hpp), its word j is K units 4t + j of those rows.
    if (tile0 + warp < a.tiles) {
      const uint8_t* record = act + kActBytes + warp * gemv::kChunkBytes;
      const uint4 lo = *reinterpret_cast<const uint4*>(record + gemv::lane_data_offset(lane));
      const uint4 hi =
          *reinterpret_cast<const uint4*>(record + gemv::lane_data_offset(lane) + gemv::kRecordHalfBytes);
      const uint32_t sc = *reinterpret_cast<const uint16_t*>(record + gemv::lane_scale_offset(lane));
      const typename Atom::Scale scales[2] = {Atom::scale(sc & 0xFFu), Atom::scale(sc >> 8)};
      const uint32_t words[2][4] = {{lo.x, lo.y, lo.z, lo.w}, {hi.x, hi.y, hi.z, hi.w}};
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          uint32_t p[4];
          Atom::decode(words[h][j], scales[h], p);
          *reinterpret_cast<uint4*>(decoded + swizzled(16 * warp + g + 8 * h, 4 * t + j)) = natural_order(p);
        }
    }
    __syncthreads();
    if (!warp_active) return;
#pragma unroll 2
    for (int s = 0; s < gemv::kChunkK / 16; ++s) {
      uint32_t af[4][4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int row = 64 * wm + 16 * i + (lane & 7) + 8 * ((lane >> 3) & 1);
        kernels::ldmatrix_x4(act + swizzled(row, 2 * s + (lane >> 4)), af[i][0], af[i][1], af[i][2], af[i][3]);
      }
      uint32_t bf[2][2][2];  // [weight tile][half][b0, b1]
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const int n = 32 * wn + 16 * q + (lane & 7) + 8 * (lane >> 4);
        kernels::ldmatrix_x4(decoded + swizzled(n, 2 * s + ((lane >> 3) & 1)), bf[q][0][0], bf[q][0][1], bf[q][1][0],
                             bf[q][1][1]);
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int q = 0; q < 2; ++q)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            Atom::mma(acc[i][q][h], af[i][0], af[i][1], af[i][2], af[i][3], bf[q][h][0], bf[q][h][1]);
    }
  });
  if (!warp_active) return;
  store_rows<kGemm1, 4>(EpilogueArgs{a.bias, a.n, a.row_pair, a.pair_weights, a.out, a.alpha, a.limit}, acc, expert,
                        tile.row0 + 64 * wm, tile.rows - 64 * wm, tile0 + 2 * wn, g, t);
#endif
}

template <class F>
void for_each_variant(F&& f) {
  f(wide_gemm_kernel<true, false>);
  f(wide_gemm_kernel<true, true>);
  f(wide_gemm_kernel<false, false>);
  f(wide_gemm_kernel<false, true>);
}

}  // namespace

size_t wide_smem_bytes() { return kSmemBytes; }

bool wide_fits(int cc_major, size_t smem_per_block_optin) {
  return cc_major == 9 &&
         kSmemBytes + kernels::max_static_smem([](auto f) { for_each_variant(f); }) <= smem_per_block_optin;
}

void configure_wide() {
  for_each_variant([](auto kernel) {
    MXMOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  });
}

template <bool kGemm1>
void launch_wide(const MmaArgs& a, int64_t tokens, int max_active, cudaStream_t stream) {
  if (tokens == 0 || max_active == 0) return;
  const dim3 grid(m_tile_blocks(a, tokens, max_active, kBM), static_cast<unsigned>((a.tiles + kTiles - 1) / kTiles));
  auto go = [&](auto kernel) { kernels::launch_with_pdl(kernel, grid, dim3(kThreads), kSmemBytes, stream, a); };
  a.wide_scales ? go(wide_gemm_kernel<kGemm1, true>) : go(wide_gemm_kernel<kGemm1, false>);
}
template void launch_wide<true>(const MmaArgs&, int64_t, int, cudaStream_t);
template void launch_wide<false>(const MmaArgs&, int64_t, int, cudaStream_t);

}  // namespace mxmoe::mma
