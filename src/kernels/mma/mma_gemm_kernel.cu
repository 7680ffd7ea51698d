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
#include "kernels/common/pdl_launch.cuh"
#include "kernels/gemv/gemv_device.cuh"
#include "kernels/gemv/gemv_layout.hpp"
#include "kernels/mma/bf16_atom.cuh"
#include "kernels/mma/mma_gemm.hpp"
#include "moe/cuda_check.hpp"

namespace mxmoe::mma {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kStages = 2;
constexpr int kTilesPerBlock = kBlockN / gemv::kTileRows;                // 16
constexpr int kWeightStageBytes = kTilesPerBlock * gemv::kChunkBytes;     // 17408
constexpr int kGranulesPerRecord = gemv::kChunkBytes / 16;               // 68
// One staged activation row of a chunk: 128 bf16, plus 64 bytes so rows g and g+1 fall 4 bank quads apart.
constexpr int kRowBytes = gemv::kChunkK * 2 + 64;
__host__ __device__ constexpr int act_stage_bytes(int m_tiles) { return block_m(m_tiles) * kRowBytes; }
__host__ __device__ constexpr int stage_bytes(int m_tiles) { return act_stage_bytes(m_tiles) + kWeightStageBytes; }

// Where 16-byte group (block b, word w) of a chunk sits in a staged row: for one w, lanes t = 0..3 of
// rows g and g+1 then read 8 distinct bank quads.
__device__ __forceinline__ int granule_slot(int b, int w) { return (w >> 1) * 8 + (w & 1) * 4 + b; }

// 8 bf16 (elements 0..7 of a word) -> the decode's pair order (3,7), (2,6), (1,5), (0,4).
__device__ __forceinline__ void to_pairs(const uint4& x, uint32_t (&p)[4]) {
  p[0] = __byte_perm(x.y, x.w, 0x7632);
  p[1] = __byte_perm(x.y, x.w, 0x5410);
  p[2] = __byte_perm(x.x, x.z, 0x7632);
  p[3] = __byte_perm(x.x, x.z, 0x5410);
}

struct MTile {
  int expert;  // -1: past the last m-tile
  int row0;    // first sorted row
  int rows;
};

// Block x -> its m-tile: the active experts' ceil(rows / kBlockM) tiles, in order (warp 0).
template <int kBlockM>
__device__ void find_m_tile(const MmaArgs& a, MTile& tile) {
  const int lane = threadIdx.x & 31;
  if (threadIdx.x >= 32) return;
  const int x = static_cast<int>(blockIdx.x);
  const int count = *a.active_count;
  if (lane == 0) tile.expert = -1;
  __syncwarp();
  int base = 0;
  for (int j0 = 0; j0 < count; j0 += 32) {
    const int j = j0 + lane;
    int e = 0, start = 0, rows = 0;
    if (j < count) {
      e = a.active_experts[j];
      start = a.expert_offsets[e];
      rows = a.expert_offsets[e + 1] - start;
    }
    const int tiles = (rows + kBlockM - 1) / kBlockM;
    int incl = tiles;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, incl, off);
      if (lane >= off) incl += v;
    }
    const int first = base + incl - tiles;
    if (j < count && x >= first && x < first + tiles) {
      const int m0 = (x - first) * kBlockM;
      tile.expert = e;
      tile.row0 = start + m0;
      tile.rows = min(kBlockM, rows - m0);
    }
    base += __shfl_sync(0xffffffffu, incl, 31);
  }
}

// Two blocks per SM where the registers allow it; the 64-row tile's 64 accumulators per m16 group
// need more than 128 registers (it spilled), so it runs one block per SM.
template <int kMTiles>
constexpr int kMinBlocks = kMTiles >= 4 ? 1 : 2;

template <bool kGemm1, bool kWideScales, int kMTiles>
__global__ void __launch_bounds__(kThreads, kMinBlocks<kMTiles>) mma_gemm_kernel(const MmaArgs a) {
  using Atom = Bf16Atom<kWideScales>;
  constexpr int kBlockM = block_m(kMTiles);
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ MTile tile;
  __shared__ int64_t src_row[kBlockM];  // element offset of each row's activations; -1: padding row
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  // Programmatic dependent launch: the routing and the activations come from the predecessors.
  cudaGridDependencySynchronize();
  cudaTriggerProgrammaticLaunchCompletion();
  find_m_tile<kBlockM>(a, tile);
  __syncthreads();
  if (tile.expert < 0) return;
  const int expert = tile.expert;
  if (threadIdx.x < kBlockM) {
    const int r = threadIdx.x, row = tile.row0 + r;
    src_row[r] = r >= tile.rows ? -1 : static_cast<int64_t>(kGemm1 ? a.row_pair[row] / a.top_k : row) * a.k;
  }
  __syncthreads();
  const int tile0 = static_cast<int>(blockIdx.y) * kTilesPerBlock;
  const uint8_t* weights = a.weights + expert * a.expert_stride;

  auto load_stage = [&](int stage, int c) {
    uint8_t* act = smem + stage * stage_bytes(kMTiles);
    uint8_t* wst = act + act_stage_bytes(kMTiles);
    for (int i = threadIdx.x; i < kBlockM * 16; i += kThreads) {
      const int r = i >> 4, gr = i & 15;  // gr = block * 4 + word
      const int kk = c * gemv::kChunkK + gr * 8;
      const int64_t src = src_row[r];
      const bool valid = src >= 0 && kk < a.k;  // padding rows and K past the end read as zeros
      kernels::cp_async_16(act + r * kRowBytes + granule_slot(gr >> 2, gr & 3) * 16, a.act + (valid ? src + kk : 0),
                           valid);
    }
    for (int i = threadIdx.x; i < kTilesPerBlock * kGranulesPerRecord; i += kThreads) {
      const int j = i / kGranulesPerRecord, off = (i - j * kGranulesPerRecord) * 16;
      if (tile0 + j < a.tiles)
        kernels::cp_async_16(wst + j * gemv::kChunkBytes + off,
                             weights + (static_cast<int64_t>(tile0 + j) * a.chunks + c) * gemv::kChunkBytes + off, true);
    }
  };

  float acc[kMTiles][2][2][4] = {};  // [m16 tile][weight tile][half: rows 0-7 / 8-15][fragment]
  const int wt = 2 * warp;           // the warp's first weight tile in the block
  const bool warp_active = tile0 + wt < a.tiles;  // tiles come in pairs: N is a multiple of 32

  load_stage(0, 0);
  kernels::cp_async_commit();
  for (int c = 0; c < a.chunks; ++c) {
    if (c + 1 < a.chunks) load_stage((c + 1) & 1, c + 1);
    kernels::cp_async_commit();
    kernels::cp_async_wait<1>();
    __syncthreads();
    if (warp_active) {
      const uint8_t* act = smem + (c & 1) * stage_bytes(kMTiles);
      const uint8_t* wst = act + act_stage_bytes(kMTiles);
      uint32_t words[2][2][4];  // [weight tile][half][word]
      typename Atom::Scale scales[2][2];
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const uint8_t* record = wst + (wt + q) * gemv::kChunkBytes;
        const uint4 lo = *reinterpret_cast<const uint4*>(record + lane * 16);
        const uint4 hi = *reinterpret_cast<const uint4*>(record + 512 + lane * 16);
        const uint32_t sc = *reinterpret_cast<const uint16_t*>(record + gemv::kChunkWeightBytes + lane * 2);
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
    __syncthreads();  // the stage is refilled next
  }
  if (!warp_active) return;

  // Epilogue. Lane (g, t) holds rows g (fragment 0, 1) and g+8 (2, 3) of each m16 tile, weight rows
  // 2t and 2t+1 of each half: in GEMM1 the low half holds the gates and the high half the linears of
  // features 8*tile + 2t, +1 (gemv_layout.hpp), so the SwiGLU runs in registers.
#pragma unroll
  for (int i = 0; i < kMTiles; ++i)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = i * 16 + g + 8 * hr;
      if (r >= tile.rows) continue;
      const int64_t row = tile.row0 + r;
      float weight = 1.f;
      if constexpr (!kGemm1) weight = a.pair_weights[a.row_pair[row]];
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const int ti = tile0 + wt + q;
        const float* lo = &acc[i][q][0][2 * hr];
        const float* hi = &acc[i][q][1][2 * hr];
        if constexpr (kGemm1) {
          const int f = ti * 8 + 2 * t;
          float gate0 = lo[0], gate1 = lo[1], lin0 = hi[0], lin1 = hi[1];
          if (a.bias) {
            const uint2 bv = *reinterpret_cast<const uint2*>(a.bias + static_cast<int64_t>(expert) * a.n + 2 * f);
            gate0 += __bfloat162float(__ushort_as_bfloat16(static_cast<uint16_t>(bv.x & 0xFFFFu)));
            lin0 += __bfloat162float(__ushort_as_bfloat16(static_cast<uint16_t>(bv.x >> 16)));
            gate1 += __bfloat162float(__ushort_as_bfloat16(static_cast<uint16_t>(bv.y & 0xFFFFu)));
            lin1 += __bfloat162float(__ushort_as_bfloat16(static_cast<uint16_t>(bv.y >> 16)));
          }
          const __nv_bfloat162 v = __floats2bfloat162_rn(gemv::swiglu(gate0, lin0, a.alpha, a.limit),
                                                         gemv::swiglu(gate1, lin1, a.alpha, a.limit));
          *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(a.out) + row * (a.n / 2) + f) = v;
        } else {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int col = ti * gemv::kTileRows + 8 * h + 2 * t;
            const float* v = h == 0 ? lo : hi;
            float y0 = v[0], y1 = v[1];
            if (a.bias) {
              const uint32_t bv = *reinterpret_cast<const uint32_t*>(a.bias + static_cast<int64_t>(expert) * a.n + col);
              y0 += __bfloat162float(__ushort_as_bfloat16(static_cast<uint16_t>(bv & 0xFFFFu)));
              y1 += __bfloat162float(__ushort_as_bfloat16(static_cast<uint16_t>(bv >> 16)));
            }
            *reinterpret_cast<float2*>(static_cast<float*>(a.out) + row * a.n + col) = make_float2(y0 * weight, y1 * weight);
          }
        }
      }
    }
}

template <class F>
void for_each_variant(F&& f) {
  f(mma_gemm_kernel<true, false, 1>, 1);
  f(mma_gemm_kernel<true, false, 2>, 2);
  f(mma_gemm_kernel<true, false, 4>, 4);
  f(mma_gemm_kernel<true, true, 1>, 1);
  f(mma_gemm_kernel<true, true, 2>, 2);
  f(mma_gemm_kernel<true, true, 4>, 4);
  f(mma_gemm_kernel<false, false, 1>, 1);
  f(mma_gemm_kernel<false, false, 2>, 2);
  f(mma_gemm_kernel<false, false, 4>, 4);
  f(mma_gemm_kernel<false, true, 1>, 1);
  f(mma_gemm_kernel<false, true, 2>, 2);
  f(mma_gemm_kernel<false, true, 4>, 4);
}

template <bool kGemm1>
void launch(const MmaArgs& a, int64_t tokens, int max_active, int m_tiles, cudaStream_t stream) {
  if (tokens == 0 || max_active == 0) return;
  MXMOE_REQUIRE(m_tiles == 1 || m_tiles == 2 || m_tiles == 4, "mma: m_tiles must be 1, 2 or 4, got ", m_tiles);
  const int64_t pairs = tokens * a.top_k;
  // Sum over the experts of ceil(rows / kBlockM) <= pairs / kBlockM + experts with rows.
  const int64_t m_blocks = pairs / block_m(m_tiles) + max_active;
  MXMOE_REQUIRE(m_blocks < (int64_t{1} << 31), "mma: too many rows (", pairs, ")");
  const dim3 grid(static_cast<unsigned>(m_blocks), static_cast<unsigned>((a.tiles + kTilesPerBlock - 1) / kTilesPerBlock));
  const size_t smem = smem_bytes(m_tiles);
  auto go = [&](auto kernel) { kernels::launch_with_pdl(kernel, grid, dim3(kThreads), smem, stream, a); };
  switch (m_tiles) {
    case 1:
      a.wide_scales ? go(mma_gemm_kernel<kGemm1, true, 1>) : go(mma_gemm_kernel<kGemm1, false, 1>);
      break;
    case 2:
      a.wide_scales ? go(mma_gemm_kernel<kGemm1, true, 2>) : go(mma_gemm_kernel<kGemm1, false, 2>);
      break;
    default:
      a.wide_scales ? go(mma_gemm_kernel<kGemm1, true, 4>) : go(mma_gemm_kernel<kGemm1, false, 4>);
  }
}

}  // namespace

int m_tiles_for(double rows_per_expert) {
  if (rows_per_expert <= 16) return 1;
  if (rows_per_expert <= 32) return 2;
  return 4;
}

size_t smem_bytes(int m_tiles) { return static_cast<size_t>(kStages) * stage_bytes(m_tiles); }

bool fits(size_t smem_per_block_optin) {
  bool ok = true;
  for_each_variant([&](auto kernel, int m_tiles) {
    cudaFuncAttributes attr{};
    MXMOE_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
    ok = ok && attr.sharedSizeBytes + smem_bytes(m_tiles) <= smem_per_block_optin;
  });
  return ok;
}

void configure(size_t smem_per_block_optin) {
  for_each_variant([&](auto kernel, int m_tiles) {
    MXMOE_REQUIRE(smem_bytes(m_tiles) <= smem_per_block_optin, "mma: a tile needs ", smem_bytes(m_tiles),
                  " bytes of shared memory, the device allows ", smem_per_block_optin);
    MXMOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem_bytes(m_tiles))));
  });
}

void launch_gemm1(const MmaArgs& args, int64_t tokens, int max_active, int m_tiles, cudaStream_t stream) {
  launch<true>(args, tokens, max_active, m_tiles, stream);
}
void launch_gemm2(const MmaArgs& args, int64_t tokens, int max_active, int m_tiles, cudaStream_t stream) {
  launch<false>(args, tokens, max_active, m_tiles, stream);
}

}  // namespace mxmoe::mma
