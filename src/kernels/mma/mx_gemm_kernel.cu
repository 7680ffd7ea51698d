// The tensor-core grouped GEMM with MXFP8 activations and an MX atom (mx_gemm.hpp, mx_atoms.cuh).
//
// Grid: x = halves of the expand's 128-row m-tiles (x / 2 is the m-tile, x % 2 its first or second
// 64 rows; a half without rows exits), y = groups of 256 weight rows. 8 warps; warp w owns weight
// tiles 2w, 2w+1 (4 n8 groups) for all 64 rows (4 m16 groups). Per chunk of K = 128, a 2-stage
// cp.async pipeline brings the codes (64 rows x 128 bytes), the chunk's 512 swizzled scale bytes of
// the 128-row group and the 16 weight records. One MMA per MX block: lane (g, t) reads word t of block
// b of its weight row straight from the record (any lane may read any word in shared memory), and
// bytes 8t..8t+7 of block b of its activation rows (mx_fragments.cuh has the slot order).
// GEMM1 with the MXFP8 epilogue (kMxOut) puts its 64 x 128 SwiGLU outputs in shared memory and
// quantises them there, one thread per (row, 32-feature block): GEMM2's input without an expand pass.
#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/common/cp_async.cuh"
#include "common/mxfp8_quant.cuh"
#include "common/pdl_launch.cuh"
#include "layout/gemv_layout.hpp"
#include "kernels/mma/chunk_pipeline.cuh"
#include "kernels/mma/epilogue.cuh"
#include "kernels/mma/mx_atoms.cuh"
#include "kernels/mma/mx_fragments.cuh"
#include "kernels/mma/mx_gemm.hpp"
#include "kernels/mma/weight_stage.cuh"
#include "kernels/tile_table.hpp"
#include "common/cuda_check.hpp"
#include "mxmoe/scale_layout.hpp"
#include "common/m_tiles.cuh"

namespace mxmoe::mma {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kMTiles = 4;
constexpr int kBlockM = 16 * kMTiles;                 // 64
constexpr int kTilesPerBlock = 16;                    // 256 weight rows
constexpr int kCodeRowBytes = gemv::kChunkK + 32;     // rows g..g+3 of a half-warp's 8-byte reads: distinct banks
constexpr int kActBytes = kBlockM * kCodeRowBytes;
constexpr int kScaleBytes = 512;                      // one chunk (4 k-blocks) of a 128-row group, swizzled
constexpr int kWeightBytes = kTilesPerBlock * gemv::kChunkBytes;
constexpr int kStageBytes = kActBytes + kScaleBytes + kWeightBytes;
constexpr int kStages = 2;  // 55 KB; deeper measured no faster for the Bf16Atom tiles (mma_gemm_kernel.cu)
// The tile table's MX row (kernels/tile_table.hpp) is this tile; the table checks that it fits SM12x's
// 99 KB. One row: a second MX tile would be a template parameter of the kernel first.
constexpr int kRow = kernels::find_row(kernels::TileFamily::Mx, kBlockM);
static_assert(kRow >= 0, "the MX tile is a row of the tile table");
constexpr kernels::TileRow kMxRow = kernels::kTileTable[kRow];
static_assert(kMxRow.weight_rows == kTilesPerBlock * gemv::kTileRows && kMxRow.k_chunk == gemv::kChunkK &&
                  kMxRow.stages == kStages && kMxRow.warps == kWarps && kMxRow.smem_bytes == kStages * kStageBytes,
              "the MX row's shape is the kernel's");
static_assert(kernels::all_rows_of<kernels::TileFamily::Mx>([](auto i) { return decltype(i)::value == kRow; }),
              "one MX row");

// The MXFP8 epilogue's fp32 tile: 64 rows of the block's 128 features, padded so that the 8 rows
// read by a quarter-warp start in different banks.
constexpr int kOutFeatures = kTilesPerBlock * 8;
constexpr int kOutPitch = kOutFeatures + 4;
static_assert(kBlockM * kOutPitch * 4 <= kStages * kStageBytes, "the epilogue tile reuses the stages");

// Quantises the tile (rows [0, rows) real, the rest padding) into GEMM2's input: codes and swizzled
// scales of padded rows padded0.., features f0..f0+127 of I; the block of the last feature group
// also zeroes the padding k-blocks' scales.
__device__ void quantise_out_tile(const MxArgs& a, const float* tile_out, int64_t padded0, int rows, int f0) {
  const int inter = a.n / 2, kblocks = inter / 32;
  const int padded_kb = static_cast<int>(padded_kblocks(kblocks));
  for (int i = threadIdx.x; i < kBlockM * (kOutFeatures / 32); i += kThreads) {
    // Thread -> (row r, block jb), rows fastest: a quarter-warp reads 8 rows of one block.
    const int r = i % kBlockM, jb = i / kBlockM;
    const int kb = f0 / 32 + jb;
    if (kb >= kblocks) continue;
    const int64_t prow = padded0 + r;
    uint32_t out[8] = {};
    uint32_t byte = 0;
    if (r < rows) {
      float x[32];
      const float4* src = reinterpret_cast<const float4*>(tile_out + r * kOutPitch + 32 * jb);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float4 v = src[j];
        x[4 * j] = v.x, x[4 * j + 1] = v.y, x[4 * j + 2] = v.z, x[4 * j + 3] = v.w;
      }
      byte = kernels::quantise_mxfp8_block(x, a.floor_rule, out);
    }
    uint4* codes = reinterpret_cast<uint4*>(a.out_codes + prow * inter + kb * 32);
    codes[0] = make_uint4(out[0], out[1], out[2], out[3]);
    codes[1] = make_uint4(out[4], out[5], out[6], out[7]);
    a.out_scales[swizzled_scale_offset(prow, kb, kblocks)] = static_cast<uint8_t>(byte);
  }
  if (blockIdx.y == gridDim.y - 1)
    for (int i = threadIdx.x; i < kBlockM * (padded_kb - kblocks); i += kThreads)
      a.out_scales[swizzled_scale_offset(padded0 + i % kBlockM, kblocks + i / kBlockM, kblocks)] = 0;
}

template <bool kGemm1, class Atom, bool kMxOut = false>
__global__ void __launch_bounds__(kThreads, 1) mx_gemm_kernel(const MxArgs a) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ routing::MTile tile;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  // Programmatic dependent launch: the routing and the expanded activations come from predecessors.
  kernels::pdl_wait();
  kernels::pdl_trigger();
  const int x128 = static_cast<int>(blockIdx.x) / 2, half = static_cast<int>(blockIdx.x) % 2;
  routing::find_m_tile<128>(x128, a.experts, a.expert_offsets, tile);
  __syncthreads();
  if (tile.expert < 0) return;
  const int rows = min(kBlockM, tile.rows - kBlockM * half);
  if (rows <= 0) return;
  const int expert = tile.expert;
  const int64_t padded0 = int64_t{x128} * 128 + kBlockM * half;  // first row of the codes
  const int64_t n_cb = padded_kblocks(a.k / 32) / 4;              // scale chunks of a 128-row group
  const int tile0 = static_cast<int>(blockIdx.y) * kTilesPerBlock;
  const uint8_t* weights = a.weights + expert * a.expert_stride;

  auto load_stage = [&](int stage, int c) {
    uint8_t* act = smem + stage * kStageBytes;
    uint8_t* sc = act + kActBytes;
    uint8_t* wst = sc + kScaleBytes;
    for (int i = threadIdx.x; i < kBlockM * 8; i += kThreads) {
      const int r = i >> 3, gr = i & 7;
      const int kk = c * gemv::kChunkK + gr * 16;
      const bool valid = kk < a.k;  // past K: zeros (they meet zero weights)
      kernels::cp_async_16(act + r * kCodeRowBytes + gr * 16, a.codes + (padded0 + r) * a.k + (valid ? kk : 0), valid);
    }
    if (threadIdx.x < kScaleBytes / 16)
      kernels::cp_async_16(sc + threadIdx.x * 16, a.scales + (x128 * n_cb + c) * kScaleBytes + threadIdx.x * 16, true);
    load_weight_records<kTilesPerBlock, kThreads>(wst, weights, tile0, a.tiles, a.chunks, c);
  };

  float acc[kMTiles][2][2][4] = {};
  const int wt = 2 * warp;
  const bool warp_active = tile0 + wt < a.tiles;

  run_chunk_pipeline<kStages>(a.chunks, load_stage, [&](int stage) {
    if (warp_active) {
      const uint8_t* act = smem + stage * kStageBytes;
      const uint8_t* sc = act + kActBytes;
      const uint8_t* wst = sc + kScaleBytes;
#pragma unroll 1
      for (int b = 0; b < 4; ++b) {
        uint32_t bw[2][2][2];  // [weight tile][half][first, second slots]
        float fb[2][2][2];     // emulated: the column scales (rows 2t, 2t+1 of the group)
        uint32_t sfb[2][2];    // native: column g's scale byte
#pragma unroll
        for (int q = 0; q < 2; ++q)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const uint8_t* record = wst + (wt + q) * gemv::kChunkBytes;
            const uint32_t word =
                *reinterpret_cast<const uint32_t*>(record + gemv::record_data_offset(g, b, h) + 4 * t);
            mx_weight_slots<Atom::kContainers>(word, bw[q][h][0], bw[q][h][1]);
            if constexpr (Atom::kContainers) {
              sfb[q][h] = record[gemv::record_scale_offset(native_scale_b_row(g), b, h)];
            } else {
              fb[q][h][0] = e8m0_value(record[gemv::record_scale_offset(emulated_scale_b_row(t, 0), b, h)]);
              fb[q][h][1] = e8m0_value(record[gemv::record_scale_offset(emulated_scale_b_row(t, 1), b, h)]);
            }
          }
#pragma unroll
        for (int i = 0; i < kMTiles; ++i) {
          const int l = 16 * i + g;
          const uint8_t* row = act + l * kCodeRowBytes + b * 32 + 8 * t;
          const uint2 lo = *reinterpret_cast<const uint2*>(row);
          const uint2 hi = *reinterpret_cast<const uint2*>(row + 8 * kCodeRowBytes);
          uint32_t a0, a1, a2, a3;
          mx_act_slots(lo.x, lo.y, a0, a2);
          mx_act_slots(hi.x, hi.y, a1, a3);
          const uint32_t sa_lo = sc[act_scale_index(half, l, b)], sa_hi = sc[act_scale_index(half, l + 8, b)];
#pragma unroll
          for (int q = 0; q < 2; ++q)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              if constexpr (Atom::kContainers)
                Atom::mma(acc[i][q][h], a0, a1, a2, a3, bw[q][h][0], bw[q][h][1], native_scale_a(t, sa_lo, sa_hi),
                          sfb[q][h]);
              else
                Atom::mma(acc[i][q][h], a0, a1, a2, a3, bw[q][h][0], bw[q][h][1], e8m0_value(sa_lo),
                          e8m0_value(sa_hi), fb[q][h][0], fb[q][h][1]);
            }
        }
      }
    }
  });
  if constexpr (kGemm1 && kMxOut) {
    __syncthreads();  // every warp is done with the stages: their shared memory is free for the tile
    float* tile_out = reinterpret_cast<float*>(smem);
    EpilogueArgs e{a.bias, a.n, a.row_pair, a.pair_weights, tile_out, a.alpha, a.limit, kOutPitch, tile0 * 8};
    if (warp_active) store_rows<true, kMTiles, true>(e, acc, expert, 0, rows, tile0 + wt, g, t);
    __syncthreads();
    quantise_out_tile(a, tile_out, padded0, rows, tile0 * 8);
    return;
  }
  if (!warp_active) return;
  store_rows<kGemm1, kMTiles, true>(EpilogueArgs{a.bias, a.n, a.row_pair, a.pair_weights, a.out, a.alpha, a.limit},
                                    acc, expert, tile.row0 + kBlockM * half, rows, tile0 + wt, g, t);
}

// f(kernel) for each kernel of the table's MX row (every profile has it).
template <class F>
void for_each_variant(F&& f) {
  kernels::for_each_row<kernels::TileFamily::Mx>([&](auto) {
    f(mx_gemm_kernel<true, MxEmulatedAtom>);
    f(mx_gemm_kernel<true, MxEmulatedAtom, true>);
    f(mx_gemm_kernel<false, MxEmulatedAtom>);
    f(mx_gemm_kernel<true, MxNativeAtom>);
    f(mx_gemm_kernel<true, MxNativeAtom, true>);
    f(mx_gemm_kernel<false, MxNativeAtom>);
    // The self-test's planted fault (mx_atoms.cuh), in the plan the self-test runs: the MXFP8 epilogue.
    f(mx_gemm_kernel<true, MxPlantedFaultAtom, true>);
    f(mx_gemm_kernel<false, MxPlantedFaultAtom>);
  });
}

template <bool kGemm1>
void launch(MxAtom atom, const MxArgs& a, int64_t tokens, int max_active, cudaStream_t stream) {
  if (tokens == 0 || max_active == 0) return;
  const int64_t halves = 2 * routing::m_tiles_bound(tokens * a.top_k, max_active, 128);
  MXMOE_REQUIRE(halves < (int64_t{1} << 31), "mx: too many rows (", tokens * a.top_k, ")");
  const dim3 grid(static_cast<unsigned>(halves), static_cast<unsigned>((a.tiles + kTilesPerBlock - 1) / kTilesPerBlock));
  const size_t smem = mx_smem_bytes();
  auto go = [&](auto kernel) { kernels::launch_with_pdl(kernel, grid, dim3(kThreads), smem, stream, a); };
  const bool mx_out = kGemm1 && a.out_codes != nullptr;
  MXMOE_REQUIRE(!mx_out || (a.out_scales != nullptr && a.n % 64 == 0),
                "mx: the MXFP8 epilogue needs out_scales and I a multiple of 32, got I = ", a.n / 2);
  MXMOE_REQUIRE(atom != MxAtom::PlantedFault || !kGemm1 || mx_out,
                "mx: the planted-fault atom is built for the MXFP8 epilogue's plan only");
  if constexpr (kGemm1) {
    if (mx_out) {
      switch (atom) {
        case MxAtom::Native: return go(mx_gemm_kernel<true, MxNativeAtom, true>);
        case MxAtom::Emulated: return go(mx_gemm_kernel<true, MxEmulatedAtom, true>);
        case MxAtom::PlantedFault: return go(mx_gemm_kernel<true, MxPlantedFaultAtom, true>);
      }
    }
    atom == MxAtom::Native ? go(mx_gemm_kernel<true, MxNativeAtom>) : go(mx_gemm_kernel<true, MxEmulatedAtom>);
  } else {
    switch (atom) {
      case MxAtom::Native: return go(mx_gemm_kernel<false, MxNativeAtom>);
      case MxAtom::Emulated: return go(mx_gemm_kernel<false, MxEmulatedAtom>);
      case MxAtom::PlantedFault: return go(mx_gemm_kernel<false, MxPlantedFaultAtom>);
    }
  }
}

}  // namespace

size_t mx_smem_bytes() { return static_cast<size_t>(kMxRow.smem_bytes); }

bool mx_supported(MxAtom atom, int cc_major, int cc_minor) {
  if (atom == MxAtom::Native) return cc_major == 12;  // Emulated and PlantedFault: FP8 mma.sync
  return cc_major > 8 || (cc_major == 8 && cc_minor >= 9);
}

void mx_configure() {
  for_each_variant([](auto kernel) {
    MXMOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(mx_smem_bytes())));
  });
}

void launch_mx_gemm1(MxAtom atom, const MxArgs& args, int64_t tokens, int max_active, cudaStream_t stream) {
  launch<true>(atom, args, tokens, max_active, stream);
}
void launch_mx_gemm2(MxAtom atom, const MxArgs& args, int64_t tokens, int max_active, cudaStream_t stream) {
  launch<false>(atom, args, tokens, max_active, stream);
}

}  // namespace mxmoe::mma
