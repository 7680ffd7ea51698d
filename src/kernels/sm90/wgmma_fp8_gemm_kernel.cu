// The FP8 (W4A8) wgmma tiles (wgmma_fp8_gemm.hpp).
//
// The bf16 wgmma tiles' block (wgmma_gemm_kernel.cu) with e4m3 operands: K step s (0..3) of a chunk is
// one m64nNk32 wgmma whose A fragment, in lane (g, t), is word s of MX block t of rows g and g+8 decoded
// to e4m3 at the row's exponent (fp8_decode.cuh, from a W4A8 layer's records), and whose B is the 32
// bytes of step s in each staged activation line (fp8_chunk_order.hpp). Shared memory per stage: the
// m-tile's lines (rows x 128 bytes, 1024-byte aligned, 128-byte swizzled), then a record per warp;
// one thread fills it with two tensor copies. Every chunk is a whole one (the half chunk of K % 128 == 64
// too: fp8_chunk_order.hpp). All tiles release a stage within the next chunk (after its step 1) and
// refill it after step 3. An m-tile with fewer rows than the tile runs a narrower wgmma (Fp8Shape,
// narrow_paths.cuh).
#include "kernels/sm90/wgmma_fp8_tile.cuh"

#include <algorithm>
#include <cmath>
#include <string>

namespace mxmoe::sm90 {
namespace {

// kSplit: split-K over clusters of `splits` blocks (split_k.cuh), a tile set's blocks side by side; its own
// kernel, so that the unsplit kernels stay as they were (the split's chunk range and reduction cost
// registers: 56 -> 62 in the 32-row tile, and 1% at T = 4 to 16 on an H200).
template <bool kGemm1, int kRows, bool kSplit>
__global__ void __launch_bounds__(Fp8Shape<kRows>::kThreads, Fp8Shape<kRows>::kBlocksPerSm)
    wgmma_fp8_kernel(const mma::MmaArgs a, const Fp8Operands f, const __grid_constant__ Fp8Maps maps, const int splits) {
#if MXMOE_HAS_WGMMA
  using S = Fp8Shape<kRows>;
  constexpr int kStages = S::kStages, kWarps = S::kWarps, kThreads = S::kThreads, kTiles = S::kTiles;
  static_assert(kRows / 2 * 4 * kThreads <= kStages * S::kStageBytes, "the ring holds a block's partial sums");
  constexpr int kAhead = kStages - 1;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  __shared__ routing::MTile tile;
  __shared__ float row_factor[S::kStagedFactors ? kRows : 1];  // the epilogue's factor of each m-tile row
  __shared__ __align__(8) uint64_t full[kStages];   // a stage's records and activations have landed
  __shared__ __align__(8) uint64_t empty[kStages];  // every warp is done with a stage
  __shared__ kernels::Fp8Table tables[kernels::kFp8TableEntries];  // every shift code's decode table
  uint8_t* smem = smem_raw + ((1024 - (smem_address(smem_raw) & 1023)) & 1023);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  // Blocks in m-tile-major order, as the bf16 tiles (an m-tile's weight blocks side by side).
  const int weight_blocks = (a.tiles + kTiles - 1) / kTiles;
  const int split = kSplit ? static_cast<int>(blockIdx.x) % splits : 0;
  const int tile_set = kSplit ? static_cast<int>(blockIdx.x) / splits : static_cast<int>(blockIdx.x);
  const int m_tile = tile_set / weight_blocks, weight_block = tile_set % weight_blocks;
  // The block's chunks [c0, c0 + chunks) of K; i below counts them from 0.
  const int c0 = kSplit ? split_begin(split, splits, a.chunks) : 0;
  const int chunks = kSplit ? split_begin(split + 1, splits, a.chunks) - c0 : a.chunks;
  const int tile0 = weight_block * kTiles;
  const int my_tile = tile0 + warp;
  const bool producer = threadIdx.x == 0;
  if (producer) init_ring<S>(maps, nullptr, full, empty, kWarps);
  if (warp == 1) tables[lane] = kernels::fp8_entry_table(lane);  // read after find_block_m_tile's barrier
  if (!mma::find_block_m_tile<kRows>(a, m_tile, tile)) return;
  // The staged factors (Fp8Shape::kStagedFactors): loaded here, the loads overlapping the main loop.
  if constexpr (S::kStagedFactors) {
    if (threadIdx.x < tile.rows) {
      const int64_t row = tile.row0 + threadIdx.x;
      row_factor[threadIdx.x] = kGemm1 ? f.act_scales[row] : a.pair_weights[a.row_pair[row]];
    }
  }
  const int expert = tile.expert;
  const int expert_tile0 = expert * a.tiles + tile0;
  // The narrowest wgmma that covers the m-tile's rows (narrow_paths.cuh); its stages hold only those rows.
  const int path = narrowest_path<S>(tile.rows);
  const CUtensorMap* act_map = path < S::kNarrowPaths ? &maps.act_narrow[path] : &maps.act;
  const uint32_t act_box_bytes = static_cast<uint32_t>(S::path_n(path)) * kLineBytes;
  auto load = [&](int i) {
    const int stage = i % kStages;
    load_fp8_stage<kRows>(smem + stage * S::kStageBytes, maps, act_map, act_box_bytes, c0 + i, expert_tile0, tile.row0,
                          &full[stage]);
  };
  if (producer)
    for (int i = 0; i < kAhead && i < chunks; ++i) load(i);

  // The lane's rows g and g+8 of its tile in checkpoint order (gemv_layout.hpp: GEMM1's tile rows are
  // the gates and linears of features 8 * tile + g), and their exponents (for the epilogue; the records'
  // shift codes already hold them). A warp past the GEMM's last tile decodes whatever its records hold
  // into accumulator rows that are never stored.
  const int row_lo = kGemm1 ? 2 * (8 * my_tile + g) : my_tile * gemv::kTileRows + g;
  const int row_hi = kGemm1 ? row_lo + 1 : row_lo + 8;
  const bool my_rows = my_tile < a.tiles;
  const int8_t* exponents = f.row_exponents + static_cast<int64_t>(expert) * a.n;
  const int c_lo = my_rows ? exponents[row_lo] : -128, c_hi = my_rows ? exponents[row_hi] : -128;

  const bool group_active = tile0 + (warp & ~3) < a.tiles;
  float acc[kRows / 2] = {};
  // The ring's chunks, kStages an iteration (wgmma_block.cuh).
  static_assert(kAhead == kStages - 1, "chunk i + kAhead refills chunk i - 1's stage");
  // The ring's barriers and the decode tables as warp-uniform shared-window addresses, held in uniform
  // registers across the loop. Taken from the arrays at each use, the barriers' addresses were rebuilt at
  // every wait and arrival, 8 instructions a chunk (A/B on an H200: 1-3% from T = 1 to 2048, even at 4096;
  // docs/fp8.md).
  const uint32_t bars = kernels::uniform_shared_address(full);
  const uint32_t empties = kernels::uniform_shared_address(empty);
  const uint32_t table_base = kernels::uniform_shared_address(tables);
  // The stages' descriptors: ptxas sees the stage addresses as uniform (the block's base, in a uniform
  // register) and builds them there without the shuffle of wgmma_desc_sw128_low_uniform, 6 to 9 fewer
  // instructions a chunk; but in GEMM2's 128- and 192-row tiles it then hoists all 16 of a ring's
  // descriptors out of the loop into uniform registers and spills inside the loop, so those shuffle.
  constexpr bool kShuffledDesc = !kGemm1 && kRows >= 128;
  for_each_ring_chunk<kStages, S>(chunks, path, [&](auto n, int i, int stage, uint32_t parity) {
    kernels::mbarrier_wait_parity(bars + 8u * stage, parity);
    // Chunk i - 1's groups are all retired by step 1's wait: its stage is released then, and refilled
    // with chunk i + kAhead after step 3 once every warp has released it (the bf16 tiles' ring).
    const RingSlot previous = previous_slot<kStages>(stage, parity);
    auto between = [&](int w) {
      if (w == 1 && lane == 0 && i > 0) kernels::mbarrier_arrive(empties + 8u * previous.stage);
      if (w == 3 && producer && i + kAhead < chunks) {
        if (i > 0) kernels::mbarrier_wait_parity(empties + 8u * previous.stage, previous.parity);
        load(i + kAhead);
      }
    };
    const uint8_t* st = smem + stage * S::kStageBytes;
    if (group_active) {
      wgmma_fp8_chunk<kRows, decltype(n)::value, kShuffledDesc>(
          smem_address(st), st + S::kActBytes + warp * gemv::kChunkBytes, lane, table_base, acc, between);
    } else {
      __syncwarp();
#pragma unroll
      for (int w = 0; w < 4; ++w) between(w);
    }
  });
  kernels::wgmma_wait<0>();
  kernels::wgmma_fence_operands(acc);
  if constexpr (S::kStagedFactors) __syncthreads();  // row_factor
  if constexpr (kSplit) {
    with_path_width<S>(path, [&](auto n) {
      split_k_reduce<decltype(n)::value, kThreads>(acc, smem, static_cast<uint32_t>(split), splits);
    });
    if (split != 0) return;
  }

  const int64_t pitch = padded_k(a.n / 2);
  if (kGemm1 && weight_block == weight_blocks - 1) {
    // The intermediate's padding past I (in its last chunk): zeros, which GEMM2 multiplies with the zero
    // weights of its records' blocks past K (an unwritten byte could be e4m3's NaN).
    const int features = a.n / 2, pad = static_cast<int>(pitch) - features;
    for (int i = threadIdx.x; i < tile.rows * pad; i += kThreads)
      static_cast<uint8_t*>(a.out)[(tile.row0 + i / pad) * pitch + fp8_row_position(features + i % pad)] = 0;
  }
  if (!my_rows) return;

  // acc x act_scale x 2^c: the fp32 value of the row's e4m3 products (ldexpf: exact, subnormals too).
  float(&acc_tiles)[1][kRows / 8][4] = *reinterpret_cast<float(*)[1][kRows / 8][4]>(&acc);
#pragma unroll
  for (int n = 0; n < kRows / 8; ++n)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int r = n * 8 + 2 * t + e;
      const float scale = r >= tile.rows ? 0.f
                          : !kGemm1      ? f.act_scale
                                         : (S::kStagedFactors ? row_factor[r] : f.act_scales[tile.row0 + r]);
      acc_tiles[0][n][e] = ldexpf(acc_tiles[0][n][e] * scale, c_lo);
      acc_tiles[0][n][2 + e] = ldexpf(acc_tiles[0][n][2 + e] * scale, c_hi);
    }
  const mma::EpilogueArgs epilogue{a.bias, a.n, a.row_pair, a.pair_weights, a.out, a.alpha, a.limit};
  // GEMM1's output is GEMM2's input: e4m3(SwiGLU x out_scale) in the activation order (fp8_chunk_order.hpp).
  auto gemm1_store = [out = static_cast<uint8_t*>(a.out), pitch, s = f.out_scale](int64_t row, int feature, float v) {
    out[row * pitch + fp8_row_position(feature)] = __nv_cvt_float_to_fp8(v * s, __NV_SATFINITE, __NV_E4M3);
  };
  if constexpr (S::kStagedFactors) {
    const uint16_t* bias = a.bias ? a.bias + static_cast<int64_t>(expert) * a.n : nullptr;
    mma::store_swap_rows<kGemm1>(
        epilogue, acc_tiles, tile.row0, tile.rows, my_tile, 0, g, t, gemm1_store,
        [bias](int ti, int j) { return bias ? mma::bf16_at(bias + ti * gemv::kTileRows + j) : 0.f; },
        [](int r) { return row_factor[r]; });
  } else {
    mma::store_swap_rows<kGemm1>(epilogue, acc_tiles, expert, tile.row0, tile.rows, my_tile, 0, g, t, gemm1_store);
  }
#else
  (void)a, (void)f;
  __trap();
#endif
}

// The tile table's FP8 wgmma rows (kernels/tile_table.hpp) are these shapes.
static_assert(rows_are_kernels<kernels::TileFamily::WgmmaFp8, Fp8Shape>());

// f(kernel, rows) for each kernel of the table's FP8 wgmma rows that this build has.
template <class F>
void for_each_variant(F&& f) {
  kernels::for_each_row<kernels::TileFamily::WgmmaFp8>([&](auto i) {
    constexpr int rows = kernels::kRowOf<decltype(i)>.rows;
    f(wgmma_fp8_kernel<true, rows, false>, rows);
    f(wgmma_fp8_kernel<false, rows, false>, rows);
    if constexpr (wgmma_fp8_splits_built(rows)) {
      f(wgmma_fp8_kernel<true, rows, true>, rows);
      f(wgmma_fp8_kernel<false, rows, true>, rows);
    }
  });
}

bool is_power_of_two_scale(float s) {
  int e = 0;
  return std::isfinite(s) && s > 0.f && std::frexp(s, &e) == 0.5f;
}

}  // namespace

bool wgmma_fp8_rows_supported(int rows) { return kernels::tile_built(kernels::TileFamily::WgmmaFp8, rows); }

size_t wgmma_fp8_smem_bytes(int rows) { return row_smem_bytes(kernels::TileFamily::WgmmaFp8, rows, "fp8 wgmma"); }

bool wgmma_fp8_runs(int device) {
  bool any = false;
  kernels::for_each_row<kernels::TileFamily::WgmmaFp8>([&](auto) { any = true; });
  // wgmma_in_build: the bf16 tiles are built and the build has sm_90a code; the FP8 rows are built with them.
  return any && wgmma_in_build() &&
         variants_run_on(device, [](auto f) { for_each_variant(f); }, wgmma_fp8_smem_bytes);
}

void configure_wgmma_fp8() { allow_dynamic_smem([](auto f) { for_each_variant(f); }, wgmma_fp8_smem_bytes); }

template <bool kGemm1>
void launch_wgmma_fp8(const mma::MmaArgs& a, const Fp8Operands& fp8, int64_t tokens, int max_active, int rows,
                      int splits, cudaStream_t stream) {
  MXMOE_REQUIRE(splits >= 1 && splits <= kMaxSplits && splits <= std::max(a.chunks, 1),
                "fp8 wgmma: splits must be 1 to ", kMaxSplits, " and at most the K chunks (", a.chunks, "), got ", splits);
  MXMOE_REQUIRE(splits == 1 || wgmma_fp8_splits_built(rows), "fp8 wgmma: splits > 1 runs on the ", kSplitRows,
                "-row tile only, got ", rows, " rows");
  MXMOE_REQUIRE(wgmma_fp8_rows_supported(rows), "fp8 wgmma: rows must be one of this build's fp8 wgmma tiles (",
                kernels::built_rows_list(kernels::TileFamily::WgmmaFp8), "), got ", rows);
  MXMOE_REQUIRE(a.k == padded_k(a.k) && a.k >= a.chunks * gemv::kChunkK,
                "fp8 wgmma: the activations' row length must be whole chunks covering K, got ", a.k);
  MXMOE_REQUIRE(fp8.row_exponents != nullptr, "fp8 wgmma: the row exponents are required");
  MXMOE_REQUIRE(kGemm1 ? fp8.act_scales != nullptr : std::isfinite(fp8.act_scale) && fp8.act_scale > 0.f,
                "fp8 wgmma: the activation scales are required (GEMM1: one per row; GEMM2: act_scale > 0, got ",
                fp8.act_scale, ")");
  MXMOE_REQUIRE(!kGemm1 || is_power_of_two_scale(fp8.out_scale),
                "fp8 wgmma: GEMM1's out_scale must be a power of two (fp8::gemm2_input_scale), got ", fp8.out_scale);
  MXMOE_REQUIRE(tokens * a.top_k < (int64_t{1} << 31), "fp8 wgmma: too many rows for the tensor maps: tokens ", tokens);
  if (tokens == 0 || max_active == 0) return;
  MXMOE_REQUIRE(a.n == a.tiles * gemv::kTileRows, "fp8 wgmma: N must be whole 16-row tiles, got ", a.n);
  const unsigned m_blocks = mma::m_tile_blocks(a, tokens, max_active, rows);
  const uint64_t act_dims[] = {static_cast<uint64_t>(a.k), static_cast<uint64_t>(tokens * a.top_k)};
  const uint64_t act_strides[] = {static_cast<uint64_t>(a.k)};
  auto act_map = [&](const char* what, int box_rows) {
    const uint32_t box[] = {kLineBytes, static_cast<uint32_t>(box_rows)};
    return kernels::encode_tiled_map(what, CU_TENSOR_MAP_DATA_TYPE_UINT8, a.act, act_dims, act_strides, box,
                                     CU_TENSOR_MAP_SWIZZLE_128B);
  };
  kernels::with_row<kernels::TileFamily::WgmmaFp8>(rows, [&](auto i) {
    constexpr int kRows = kernels::kRowOf<decltype(i)>.rows;
    using S = Fp8Shape<kRows>;
    const int64_t blocks = static_cast<int64_t>(m_blocks) * ((a.tiles + S::kTiles - 1) / S::kTiles) * splits;
    MXMOE_REQUIRE(blocks < (int64_t{1} << 31), "fp8 wgmma: too many blocks (", blocks, ")");
    Fp8Maps maps{};
    maps.weights = kernels::encode_record_map("fp8 wgmma weights", a, kernels::kRecordWords, S::kTiles);
    maps.act = act_map("fp8 wgmma activations", rows);
    for (int p = 0; p < S::kNarrowPaths; ++p)
      maps.act_narrow[p] = act_map("fp8 wgmma activations (a narrower path's rows)", S::narrow_n(p));
    const dim3 grid(static_cast<unsigned>(blocks)), block(S::kThreads);
    if constexpr (wgmma_fp8_splits_built(kRows)) {
      if (splits > 1) {
        kernels::launch_with_pdl_in_clusters(wgmma_fp8_kernel<kGemm1, kRows, true>, grid, block, S::kSmemBytes, stream,
                                             dim3(splits, 1, 1), a, fp8, maps, splits);
        return;
      }
    }
    kernels::launch_with_pdl(wgmma_fp8_kernel<kGemm1, kRows, false>, grid, block, S::kSmemBytes, stream, a, fp8, maps, 1);
  });
}

template void launch_wgmma_fp8<true>(const mma::MmaArgs&, const Fp8Operands&, int64_t, int, int, int, cudaStream_t);
template void launch_wgmma_fp8<false>(const mma::MmaArgs&, const Fp8Operands&, int64_t, int, int, int, cudaStream_t);

}  // namespace mxmoe::sm90
