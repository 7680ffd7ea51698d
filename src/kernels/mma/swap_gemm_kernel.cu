// The swap-AB tiles of the tensor-core family (mma_gemm.hpp): the weights on the MMA's M side (a warp's
// two 16-row weight tiles, decoded in registers as the GEMV family decodes them) and the block's rows
// of one expert on N, in n8 groups. A warp whose rows end in the first half of its groups runs only
// that half (two compile-time paths, no per-group branch), so the MMAs track the rows an expert has.
//
// Grid: x = the block's 256 (128) weight rows, y = its m-tile, so an expert's blocks run together. With
// MmaArgs::expert_done, GEMM1's blocks count themselves done per expert, and a GEMM2 block, launched
// while GEMM1's last blocks still run (programmatic dependent launch; GEMM2 launches only once every
// GEMM1 block is resident or done, so waiting cannot starve them), starts as soon as its expert's
// count is complete instead of waiting for GEMM1's whole grid: GEMM2 fills GEMM1's tail.
//
// Block: 8 warps, 256 threads. m_tiles 1, 2 and 4 (16, 32 and 64 rows): the 8 warps stack on M (256
// weight rows) and each covers every row; m_tiles 8 (128 rows): 4 warps on M (128 weight rows) x 2 on
// N, so every block shape keeps 64 accumulators or fewer per thread. K walks in chunks of 128 through
// the family's cp.async pipeline (chunk_pipeline.cuh), activations staged as in act_stage.cuh; the 16- and
// 32-row tiles take their weight records by one tensor copy per stage (swap_stage_loads.cuh).
//
// Fragments (common/mma_bf16.cuh): lane (g, t)'s record words for word w are rows g (a0, a2) and g+8
// (a1, a3) of MX block 4c+t, decoded pairs 2j and 2j+1 the K slots (2t, 2t+1) and (2t+8, 2t+9) of the
// MMA for (w, j); the same lane reads row g of its n8 group, group (t, w), whose 8 elements are stored
// already in the decode's pair order (permute_words.hpp): its words 2j and 2j+1 are b0 and b1. So the
// activations arrive permuted: GEMM1's from permute_words(), GEMM2's from GEMM1's epilogue here.
#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/common/gpu_atomics.cuh"
#include "common/pdl_launch.cuh"
#include "kernels/common/shared_load.cuh"
#include "kernels/common/static_smem.hpp"
#include "kernels/common/record_map.hpp"
#include "kernels/common/tma.cuh"
#include "kernels/gemv/gemv_device.cuh"
#include "layout/gemv_layout.hpp"
#include "kernels/mma/act_stage.cuh"
#include "kernels/mma/bf16_atom.cuh"
#include "kernels/mma/chunk_pipeline.cuh"
#include "kernels/mma/m_tile_rows.cuh"
#include "kernels/mma/mma_gemm.hpp"
#include "kernels/mma/permute_words.hpp"
#include "kernels/mma/swap_epilogue.cuh"
#include "kernels/mma/swap_stage_loads.cuh"
#include "kernels/mma/weight_stage.cuh"
#include "common/cuda_check.hpp"
#include "common/m_tiles.cuh"

namespace mxmoe::mma {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
// Two pipeline stages: deeper rings on Hopper measured no faster on an H200 (4 for the 32-row tile, 3
// for the 64-row one at two blocks per SM, 4 at one block per SM, 3 for the 16-row one at three blocks
// per SM: docs/perf-log.md), and SM120/SM121's 99 KB per block hold two.
constexpr int kStages = 2;

template <int kMTiles>
struct SwapShape {
  static constexpr int kRows = block_m(kMTiles);            // the expert's rows per block (MMA N)
  static constexpr int kWarpsN = kMTiles == 8 ? 2 : 1;
  static constexpr int kWarpsM = kWarps / kWarpsN;
  static constexpr int kNb = kRows / kWarpsN / 8;           // n8 groups per warp
  static constexpr int kTiles = 2 * kWarpsM;                // 16-row weight tiles per block
  // The 16- and 32-row tiles' stage copies: swap_stage_loads.cuh (the weights by a tensor copy).
  static constexpr bool kTensorWeights = kMTiles <= 2;
  static constexpr int kActBytes = staged_rows_bytes(kRows);
  static constexpr int kStageBytes = kActBytes + kTiles * gemv::kChunkBytes;
  static constexpr int kSmemBytes = kStages * kStageBytes;
};
// Whether this compilation's kernel of the shape takes its weights by tensor copies: code below sm_90
// has none, and its 16- and 32-row tiles copy the records as the wider tiles do (load_weight_records).
template <class S>
inline constexpr bool kTensorWeights = S::kTensorWeights && MXMOE_HAS_SM90_ASYNC;

// The tile table's swap-AB rows (kernels/tile_table.hpp) are these shapes; the table checks that every
// SM12x row fits 99 KB next to the static allowance (the 128-row tile's m-tile, row offsets, barriers).
using kernels::TileFamily;
template <class Row>
constexpr bool row_is_kernel(Row) {
  constexpr kernels::TileRow r = kernels::kRowOf<Row>;
  using S = SwapShape<r.rows / 16>;
  static_assert(r.rows == S::kRows && r.weight_rows == S::kTiles * gemv::kTileRows && r.k_chunk == gemv::kChunkK,
                "a swap-AB row's rows and weight rows are its SwapShape's");
  static_assert(r.stages == kStages && r.warps == kWarps, "a swap-AB row's stages and warps are the kernel's");
  static_assert(r.smem_bytes == S::kSmemBytes, "a swap-AB row's bytes are its SwapShape's");
  static_assert(8 * S::kRows + 64 <= kernels::kTileStaticSmemAllowance, "its static shared memory fits the allowance");
  return true;
}
static_assert(kernels::all_rows_of<TileFamily::Swap>([](auto i) { return row_is_kernel(i); }));

// The register bound: two blocks per SM on Hopper, where two fit in shared memory (one block with up to
// 255 registers, no spills, was 20% slower for the 64-row tile on an H200), and three for the 16-row
// tile (at most 80 registers; it uses 71-75, its copy addresses kept in registers: swap_stage_loads.cuh);
// bounding it to four (64 registers, a few bytes spilled) was slower (gpt-oss-120b T = 256: 567-576
// against 560-563 us), and so were its m-tiles of one n8 group in a kernel of their own at 64 registers
// (docs/perf-log.md). SM120/SM121's 100 KB per SM hold one block of any swap tile, so their registers
// are not squeezed.
__host__ __device__ constexpr int swap_min_blocks(int m_tiles) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
  (void)m_tiles;
  return 1;
#else
  return m_tiles == 1 ? 3 : 2;
#endif
}

// One chunk of one warp: its two weight tiles' records decoded word by word, each word's fragments
// multiplied with the first kGroups n8 groups of rows. Shared-window addresses (ld.shared, kept in
// 32-bit registers: generic pointers had ptxas rebuild the window base on every chunk): `act` is row
// g's group (t, 0) of the warp's first n8 group, `records` the lane's 16 bytes of the warp's first
// tile's record, `scales` the lane's two scale bytes there.
template <class Atom, int kNb, int kGroups>
__device__ __forceinline__ void swap_chunk(uint32_t act, uint32_t records, uint32_t scales_at,
                                           float (&acc)[2][kNb][4]) {
  typename Atom::Scale scales[2][2];
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    const uint32_t sc = kernels::ld_shared_u16(scales_at + q * gemv::kChunkBytes);
    scales[q][0] = Atom::scale(sc & 0xFFu);
    scales[q][1] = Atom::scale(sc >> 8);
  }
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    // Word w of rows g and g+8 of both tiles, read per word: the 16 words of a chunk held at once
    // pushed the 64-row tiles' registers into spills.
    uint32_t frag[2][2][4];  // [weight tile][half: rows g / g+8][pair]
#pragma unroll
    for (int q = 0; q < 2; ++q)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        Atom::decode(kernels::ld_shared_u32(records + q * gemv::kChunkBytes + h * gemv::kRecordHalfBytes + 4 * w),
                     scales[q][h], frag[q][h]);
    // granule_slot(t, w) - granule_slot(t, 0): the word's 16-byte group within the row
    const int word_offset = ((w >> 1) * 8 + (w & 1) * 4) * 16;
    static_assert(kGroups % 2 == 0 || kGroups == 1, "groups in pairs, or the 16-row tile's single group");
    // Two groups at a time (the 16-row tile's half path has one), their first halves of K before their
    // second: an accumulator's two MMAs per word sit four MMAs apart (two with one group), not adjacent.
    constexpr int kStep = kGroups == 1 ? 1 : 2;
#pragma unroll
    for (int n = 0; n < kGroups; n += kStep) {
      // The activations are stored permuted (permute_words.hpp): the 16 bytes are the pairs in order.
      uint4 x[kStep];
#pragma unroll
      for (int i = 0; i < kStep; ++i) x[i] = kernels::ld_shared_v4(act + (n + i) * 8 * kRowBytes + word_offset);
#pragma unroll
      for (int i = 0; i < kStep; ++i)
#pragma unroll
        for (int q = 0; q < 2; ++q)
          Atom::mma(acc[q][n + i], frag[q][0][0], frag[q][1][0], frag[q][0][1], frag[q][1][1], x[i].x, x[i].y);
#pragma unroll
      for (int i = 0; i < kStep; ++i)
#pragma unroll
        for (int q = 0; q < 2; ++q)
          Atom::mma(acc[q][n + i], frag[q][0][2], frag[q][1][2], frag[q][0][3], frag[q][1][3], x[i].z, x[i].w);
    }
  }
}

template <bool kGemm1, bool kWideScales, int kMTiles>
__device__ __forceinline__ void swap_gemm_block(const MmaArgs& a, const CUtensorMap& weights_map) {
  using S = SwapShape<kMTiles>;
  using Atom = Bf16Atom<kWideScales>;
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ routing::MTile tile;
  __shared__ int64_t src_row[S::kRows];  // element offset of each row's activations; -1: padding row
  __shared__ __align__(8) uint64_t full[kStages];  // kTensorWeights: a stage's records have landed
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if constexpr (kTensorWeights<S>) {
    if (threadIdx.x == 0) {  // published by begin_m_tile's block barrier
      kernels::tma_prefetch_map(&weights_map);
      for (int s = 0; s < kStages; ++s) kernels::mbarrier_init(&full[s], 1);
      kernels::fence_barrier_init();
    }
  }
  const int g = lane >> 2, t = lane & 3;
  // Counted (see above), GEMM2 does not wait for GEMM1's grid: GEMM1 waited for the routing before
  // this grid could launch (docs/gpu-pipeline.md), and the block waits for its expert's count below.
  const bool counted = a.expert_done != nullptr;
  if (!begin_m_tile<S::kRows, kGemm1>(a, tile, src_row, static_cast<int>(blockIdx.y), kGemm1 || !counted)) return;
  const int expert = tile.expert;
  if (!kGemm1 && counted) {
    // GEMM1's blocks per m-tile: its N is 2 I, twice this GEMM's K.
    const int gemm1_blocks = (2 * a.k / gemv::kTileRows + S::kTiles - 1) / S::kTiles;
    kernels::block_wait_count(&a.expert_done[expert], tile.expert_tiles * gemm1_blocks);
  }
  const int tile0 = static_cast<int>(blockIdx.x) * S::kTiles;

  const uint32_t smem_base = kernels::shared_address(smem);
  const int wt = 2 * (warp % S::kWarpsM);      // the warp's first weight tile in the block
  const int n0 = (warp / S::kWarpsM) * S::kNb;  // its first n8 group of rows
  // n8 groups that hold rows: the MMAs of the others would only multiply padding.
  const int groups = min(S::kNb, (tile.rows + 7) / 8 - n0);
  const bool warp_active = tile0 + wt < a.tiles && groups > 0;  // tiles come in pairs: N is a multiple of 32
  float acc[2][S::kNb][4] = {};  // [weight tile][n8 group][fragment]

  // The lane's places in stage 0, worked out once and passed through a shuffle: ptxas otherwise rebuilt
  // them from the thread index on every chunk (about 22 instructions), which it cannot do for a
  // shuffle's result.
  const auto opaque = [lane](uint32_t x) { return __shfl_sync(0xFFFFFFFFu, x, lane); };
  const uint32_t act0 = opaque(smem_base + (n0 * 8 + g) * kRowBytes + granule_slot(t, 0) * 16);
  const uint32_t records0 = opaque(smem_base + S::kActBytes + wt * gemv::kChunkBytes + gemv::lane_data_offset(lane));
  const uint32_t scales0 = opaque(smem_base + S::kActBytes + wt * gemv::kChunkBytes + gemv::lane_scale_offset(lane));
  auto compute = [&](int stage) {
    if (!warp_active) return;
    const uint32_t stage_offset = static_cast<uint32_t>(stage * S::kStageBytes);
    const uint32_t act = act0 + stage_offset, records = records0 + stage_offset, scales = scales0 + stage_offset;
    // A compile-time group count per path: a run-time bound in the unrolled loop cost a branch and a
    // warp re-convergence before every group's MMAs. Half the groups when the rows fit in them.
    if (groups > S::kNb / 2)
      swap_chunk<Atom, S::kNb, S::kNb>(act, records, scales, acc);
    else
      swap_chunk<Atom, S::kNb, S::kNb / 2>(act, records, scales, acc);
  };
  // The 16- and 32-row tiles keep each thread's activation copy addresses in registers and take the
  // weights by tensor copies (swap_stage_loads.cuh); the 64- and 128-row tiles, whose 32 and 64
  // accumulators leave no registers for the addresses, recompute them.
  if constexpr (kTensorWeights<S>) {
    const uint32_t bar0 = kernels::shared_address(&full[0]);
    const SwapStageLoads<S::kRows, S::kTiles, kThreads> loads(a, src_row, &weights_map, expert * a.tiles + tile0,
                                                              smem_base, bar0);
    static_assert(decltype(loads)::kStageBytes == S::kStageBytes, "one stage layout");
    run_chunk_pipeline<kStages>(a.chunks, bar0, [&](int stage, int c) { loads.load(stage, c); }, compute);
  } else {
    const uint8_t* weights = a.weights + expert * a.expert_stride;
    run_chunk_pipeline<kStages>(
        a.chunks,
        [&](int stage, int c) {
          uint8_t* act = smem + stage * S::kStageBytes;
          load_act_chunk<S::kRows, kThreads>(a, src_row, c, [&](int r, int gr) {
            return act + r * kRowBytes + granule_slot(gr >> 2, gr & 3) * 16;
          });
          load_weight_records<S::kTiles, kThreads>(act + S::kActBytes, weights, tile0, a.tiles, a.chunks, c);
        },
        compute);
  }
  if (warp_active) {
    // GEMM2 (swap-AB too) reads the intermediate permuted word by word.
    const int64_t pitch = a.n / 2;
    store_swap_rows<kGemm1>(EpilogueArgs{a.bias, a.n, a.row_pair, a.pair_weights, a.out, a.alpha, a.limit}, acc,
                            expert, tile.row0, tile.rows, tile0 + wt, n0, g, t,
                            bf16_intermediate(a.out, [pitch](int64_t row, int f) {
                              return row * pitch + (f & ~7) + permuted_position(f & 7);
                            }));
  }
  if (kGemm1 && counted) {
    __syncthreads();  // the block's stores, then one release count
    if (threadIdx.x == 0) kernels::release_add_gpu(&a.expert_done[expert], 1);
  }
}

// weights_map: the 16- and 32-row tiles' map of the weight records (launch_swap builds it; the other
// tiles leave it unused).
template <bool kGemm1, bool kWideScales, int kMTiles>
__global__ void __launch_bounds__(kThreads, swap_min_blocks(kMTiles))
    swap_gemm_kernel(const MmaArgs a, const __grid_constant__ CUtensorMap weights_map) {
  swap_gemm_block<kGemm1, kWideScales, kMTiles>(a, weights_map);
  // Counted, GEMM2 did not wait for GEMM1's grid: one block does before it exits, so that this grid
  // completes after GEMM1's and the next kernel's wait covers both (docs/gpu-pipeline.md).
  if (!kGemm1 && a.expert_done != nullptr && blockIdx.x == 0 && blockIdx.y == 0) kernels::pdl_wait();
}

// f(kernel, m_tiles) for each kernel of the table's swap-AB rows that this build has (none in the
// minimal profile).
template <class F>
void for_each_variant(F&& f) {
  kernels::for_each_row<TileFamily::Swap>([&](auto i) {
    constexpr int m = kernels::kRowOf<decltype(i)>.rows / 16;
    f(swap_gemm_kernel<true, false, m>, m);
    f(swap_gemm_kernel<true, true, m>, m);
    f(swap_gemm_kernel<false, false, m>, m);
    f(swap_gemm_kernel<false, true, m>, m);
  });
}

}  // namespace

size_t swap_smem_bytes(int m_tiles) {
  const int row = kernels::find_row(TileFamily::Swap, block_m(m_tiles));
  MXMOE_REQUIRE(row >= 0, "mma: no swap-AB tile has m_tiles ", m_tiles);
  return static_cast<size_t>(kernels::kTileTable[row].smem_bytes);
}

bool swap_fits(size_t smem_per_block_optin) {
  return kernels::variants_fit([](auto f) { for_each_variant(f); }, swap_smem_bytes, smem_per_block_optin);
}

void configure_swap() {
  for_each_variant([&](auto kernel, int m_tiles) {
    MXMOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(swap_smem_bytes(m_tiles))));
  });
}

template <bool kGemm1>
void launch_swap(const MmaArgs& a, int64_t tokens, int max_active, int m_tiles, cudaStream_t stream) {
  if (tokens == 0 || max_active == 0) return;
  MXMOE_REQUIRE(swap_supported(m_tiles), "mma: m_tiles must be one of this build's swap-AB tiles (",
                kernels::built_rows_list(TileFamily::Swap, 16), "), got ", m_tiles);
  const unsigned m_blocks = m_tile_blocks(a, tokens, max_active, block_m(m_tiles));
  MXMOE_REQUIRE(m_blocks <= 65535u, "mma: ", m_blocks, " m-tiles of the swap-AB tile exceed a grid's y extent");
  kernels::with_row<TileFamily::Swap>(block_m(m_tiles), [&](auto i) {
    using S = SwapShape<kernels::kRowOf<decltype(i)>.rows / 16>;
    // The 16- and 32-row tiles' weights map (record_map.hpp): a box of one chunk of a block's tiles.
    CUtensorMap weights_map{};
    if (S::kTensorWeights && kernels::runs_sm90_code())
      weights_map = kernels::encode_record_map("swap-AB weights", a, kernels::kRecordWords, S::kTiles);
    const dim3 grid(static_cast<unsigned>((a.tiles + S::kTiles - 1) / S::kTiles), m_blocks);
    auto go = [&](auto kernel) {
      kernels::launch_with_pdl(kernel, grid, dim3(kThreads), size_t{S::kSmemBytes}, stream, a, weights_map);
    };
    constexpr int m = S::kRows / 16;
    a.wide_scales ? go(swap_gemm_kernel<kGemm1, true, m>) : go(swap_gemm_kernel<kGemm1, false, m>);
  });
}

template void launch_swap<true>(const MmaArgs&, int64_t, int, int, cudaStream_t);
template void launch_swap<false>(const MmaArgs&, int64_t, int, int, cudaStream_t);

}  // namespace mxmoe::mma
