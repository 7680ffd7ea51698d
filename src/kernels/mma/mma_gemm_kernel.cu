// The tensor-core grouped GEMM (mma_gemm.hpp), with the Bf16Atom.
//
// Grid: x = m-tiles of the active experts in order (an upper bound is launched; the surplus exits),
// y = groups of kBlockN weight rows. 8 warps; warp w owns weight tiles 2w and 2w+1 of the block (32
// rows: 4 MMA n8 groups) for all kBlockM rows (m_tiles m16 groups), so each decoded weight fragment
// feeds m_tiles MMAs.
//
// K order. Lane (g, t) holds, for word w of a chunk, row g's MX block 4c+t (gemv_layout.hpp); its
// decoded pairs 2j and 2j+1 are the B fragment's K slots (2t, 2t+1) and (2t+8, 2t+9) of the MMA for
// (w, j). The activations are staged in shared memory as they are in global memory, 16-byte groups
// (block b, word w) placed by granule_slot(); a lane reads group (t, w) of its rows and permutes it
// to the same pair order, so both operands agree on which K each slot holds.
#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/common/cp_async.cuh"
#include "common/pdl_launch.cuh"
#include "kernels/common/static_smem.hpp"
#include "kernels/gemv/gemv_device.cuh"
#include "layout/gemv_layout.hpp"
#include "kernels/mma/act_stage.cuh"
#include "kernels/mma/bf16_atom.cuh"
#include "kernels/mma/chunk_pipeline.cuh"
#include "kernels/mma/epilogue.cuh"
#include "kernels/mma/m_tile_rows.cuh"
#include "kernels/mma/mma_gemm.hpp"
#include "kernels/mma/weight_stage.cuh"
#include "common/cuda_check.hpp"
#include "common/m_tiles.cuh"

namespace mxmoe::mma {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kTilesPerBlock = kBlockN / gemv::kTileRows;                // 16
constexpr int kWeightStageBytes = kTilesPerBlock * gemv::kChunkBytes;     // 17408
__host__ __device__ constexpr int act_stage_bytes(int m_tiles) { return staged_rows_bytes(block_m(m_tiles)); }
__host__ __device__ constexpr int stage_bytes(int m_tiles) { return act_stage_bytes(m_tiles) + kWeightStageBytes; }
// Pipeline depth. 4/3 stages for the 16/32-row tiles (still inside SM120's 99 KB) measured no faster
// on an H200 (T = 256 the same, T = 1024 3% slower, docs/perf-log.md): these tiles are not bound by
// load latency (the profile: barrier stalls and the decode's issue). Two stages: 44, 54 and 74 KB.
constexpr int kStages = 2;

// The tile table's register-decode rows (kernels/tile_table.hpp) are these kernels' shapes; the table
// checks that every SM12x row fits 99 KB.
using kernels::TileFamily;
template <class Row>
constexpr bool row_is_kernel(Row) {
  constexpr kernels::TileRow r = kernels::kRowOf<Row>;
  static_assert(r.rows % 16 == 0 && r.weight_rows == kBlockN && r.k_chunk == gemv::kChunkK,
                "a register-decode row: m16 tiles x kBlockN weight rows, K in chunks");
  static_assert(r.stages == kStages && r.warps == kWarps, "a register-decode row's stages and warps are the kernel's");
  static_assert(r.smem_bytes == kStages * stage_bytes(r.rows / 16), "a register-decode row's bytes are its stages'");
  return true;
}
static_assert(kernels::all_rows_of<TileFamily::Mma>([](auto i) { return row_is_kernel(i); }));

// Two blocks per SM where the registers allow it; the 64-row tile's 64 accumulators per m16 group
// need more than 128 registers (it spilled), so it runs one block per SM.
template <int kMTiles>
constexpr int kMinBlocks = kMTiles >= 4 ? 1 : 2;

template <bool kGemm1, bool kWideScales, int kMTiles>
__global__ void __launch_bounds__(kThreads, kMinBlocks<kMTiles>) mma_gemm_kernel(const MmaArgs a) {
  using Atom = Bf16Atom<kWideScales>;
  constexpr int kBlockM = block_m(kMTiles);
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ routing::MTile tile;
  __shared__ int64_t src_row[kBlockM];  // element offset of each row's activations; -1: padding row
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  if (!begin_m_tile<kBlockM, kGemm1>(a, tile, src_row)) return;
  const int expert = tile.expert;
  const int tile0 = static_cast<int>(blockIdx.y) * kTilesPerBlock;
  const uint8_t* weights = a.weights + expert * a.expert_stride;

  auto load_stage = [&](int stage, int c) {
    uint8_t* act = smem + stage * stage_bytes(kMTiles);
    uint8_t* wst = act + act_stage_bytes(kMTiles);
    // gr = block * 4 + word
    load_act_chunk<kBlockM, kThreads>(a, src_row, c, [&](int r, int gr) {
      return act + r * kRowBytes + granule_slot(gr >> 2, gr & 3) * 16;
    });
    load_weight_records<kTilesPerBlock, kThreads>(wst, weights, tile0, a.tiles, a.chunks, c);
  };

  float acc[kMTiles][2][2][4] = {};  // [m16 tile][weight tile][half: rows 0-7 / 8-15][fragment]
  const int wt = 2 * warp;           // the warp's first weight tile in the block
  const bool warp_active = tile0 + wt < a.tiles;  // tiles come in pairs: N is a multiple of 32

  run_chunk_pipeline<kStages>(a.chunks, load_stage, [&](int stage) {
    if (warp_active) {
      const uint8_t* act = smem + stage * stage_bytes(kMTiles);
      const uint8_t* wst = act + act_stage_bytes(kMTiles);
      uint32_t words[2][2][4];  // [weight tile][half][word]
      typename Atom::Scale scales[2][2];
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const uint8_t* record = wst + (wt + q) * gemv::kChunkBytes;
        const uint4 lo = *reinterpret_cast<const uint4*>(record + gemv::lane_data_offset(lane));
        const uint4 hi =
            *reinterpret_cast<const uint4*>(record + gemv::lane_data_offset(lane) + gemv::kRecordHalfBytes);
        const uint32_t sc = *reinterpret_cast<const uint16_t*>(record + gemv::lane_scale_offset(lane));
        words[q][0][0] = lo.x, words[q][0][1] = lo.y, words[q][0][2] = lo.z, words[q][0][3] = lo.w;
        words[q][1][0] = hi.x, words[q][1][1] = hi.y, words[q][1][2] = hi.z, words[q][1][3] = hi.w;
        scales[q][0] = Atom::scale(sc & 0xFFu);
        scales[q][1] = Atom::scale(sc >> 8);
      }
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        uint32_t b[2][2][4];
#pragma unroll
        for (int q = 0; q < 2; ++q)
#pragma unroll
          for (int h = 0; h < 2; ++h) Atom::decode(words[q][h][w], scales[q][h], b[q][h]);
#pragma unroll
        for (int i = 0; i < kMTiles; ++i) {
          const uint8_t* row = act + (i * 16 + g) * kRowBytes + granule_slot(t, w) * 16;
          uint32_t pa[4], pb[4];
          to_pairs(*reinterpret_cast<const uint4*>(row), pa);
          to_pairs(*reinterpret_cast<const uint4*>(row + 8 * kRowBytes), pb);
#pragma unroll
          for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int q = 0; q < 2; ++q)
#pragma unroll
              for (int h = 0; h < 2; ++h)
                Atom::mma(acc[i][q][h], pa[2 * j], pb[2 * j], pa[2 * j + 1], pb[2 * j + 1], b[q][h][2 * j],
                          b[q][h][2 * j + 1]);
        }
      }
    }
  });
  if (!warp_active) return;

  store_rows<kGemm1, kMTiles>(EpilogueArgs{a.bias, a.n, a.row_pair, a.pair_weights, a.out, a.alpha, a.limit}, acc,
                              expert, tile.row0, tile.rows, tile0 + wt, g, t);
}

// f(kernel, m_tiles) for each kernel of the table's register-decode rows that this build has.
template <class F>
void for_each_variant(F&& f) {
  kernels::for_each_row<TileFamily::Mma>([&](auto i) {
    constexpr int m = kernels::kRowOf<decltype(i)>.rows / 16;
    f(mma_gemm_kernel<true, false, m>, m);
    f(mma_gemm_kernel<true, true, m>, m);
    f(mma_gemm_kernel<false, false, m>, m);
    f(mma_gemm_kernel<false, true, m>, m);
  });
}

template <bool kGemm1>
void launch(const MmaArgs& a, int64_t tokens, int max_active, int m_tiles, cudaStream_t stream) {
  if (tokens == 0 || max_active == 0) return;
  if (a.swap_ab) {
    launch_swap<kGemm1>(a, tokens, max_active, m_tiles, stream);
    return;
  }
  MXMOE_REQUIRE(m_tiles_supported(m_tiles), "mma: m_tiles must be one of this build's register-decode tiles (",
                kernels::built_rows_list(TileFamily::Mma, 16), "), got ", m_tiles);
  const dim3 grid(m_tile_blocks(a, tokens, max_active, block_m(m_tiles)),
                  static_cast<unsigned>((a.tiles + kTilesPerBlock - 1) / kTilesPerBlock));
  const size_t smem = smem_bytes(m_tiles);
  auto go = [&](auto kernel) { kernels::launch_with_pdl(kernel, grid, dim3(kThreads), smem, stream, a); };
  kernels::with_row<TileFamily::Mma>(block_m(m_tiles), [&](auto i) {
    constexpr int m = kernels::kRowOf<decltype(i)>.rows / 16;
    a.wide_scales ? go(mma_gemm_kernel<kGemm1, true, m>) : go(mma_gemm_kernel<kGemm1, false, m>);
  });
}

}  // namespace

size_t smem_bytes(int m_tiles) {
  const int row = kernels::find_row(TileFamily::Mma, block_m(m_tiles));
  MXMOE_REQUIRE(row >= 0, "mma: no register-decode tile has m_tiles ", m_tiles);
  return static_cast<size_t>(kernels::kTileTable[row].smem_bytes);
}

bool fits(size_t smem_per_block_optin) {
  return kernels::variants_fit([](auto f) { for_each_variant(f); }, smem_bytes, smem_per_block_optin) &&
         swap_fits(smem_per_block_optin);
}

void configure(size_t smem_per_block_optin) {
  for_each_variant([&](auto kernel, int m_tiles) {
    MXMOE_REQUIRE(smem_bytes(m_tiles) <= smem_per_block_optin, "mma: a tile needs ", smem_bytes(m_tiles),
                  " bytes of shared memory, the device allows ", smem_per_block_optin);
    MXMOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem_bytes(m_tiles))));
  });
  configure_swap();
}

void launch_gemm1(const MmaArgs& args, int64_t tokens, int max_active, int m_tiles, cudaStream_t stream) {
  launch<true>(args, tokens, max_active, m_tiles, stream);
}
void launch_gemm2(const MmaArgs& args, int64_t tokens, int max_active, int m_tiles, cudaStream_t stream) {
  launch<false>(args, tokens, max_active, m_tiles, stream);
}

}  // namespace mxmoe::mma
