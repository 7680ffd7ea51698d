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
#include "kernels/sm90/wgmma_tile.cuh"

namespace mxmoe::sm90 {
namespace {

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
  // The narrower paths' maps only where the tile has those paths (launch_wgmma leaves the others zero).
  if (producer) init_ring<S>(maps, a.half_tail ? &maps.weights_half : nullptr, full, empty, kWarps);
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

  // Chunk c, a whole one or (kHalf) the half chunk, in stage `stage` at barrier parity `parity`, on the
  // path of width decltype(n)::value.
  auto run_chunk = [&](int c, int stage, uint32_t parity, auto n, auto half) {
    constexpr bool kHalf = decltype(half)::value;
    kernels::mbarrier_wait_parity(&full[stage], parity);
    const RingSlot previous = previous_slot<kStages>(stage, parity);  // chunk c - 1's
    // Chunk c - 1's wgmma groups are all retired after word 1's wait: then its stage is released, and the
    // producer refills it with chunk c + kAhead once every warp has (a warp arrives only after waiting
    // for chunk c, which the producer requested after the previous phase of that stage completed, so no
    // arrival lands in the wrong phase). The 128-row tile does both after the chunk's last group
    // (kLateRelease), out of the wgmma sequence; with a branch between the groups ptxas rebuilds every
    // wgmma descriptor from scratch, about 15% of the chunk's instructions. The tiles at two blocks per
    // SM release within the chunk: moved out, the 64-row tile's ring is one chunk shorter (and, before
    // for_each_ring_chunk, the 32-row tile's 64 registers no longer kept its wgmmas asynchronous, C7512;
    // they are serialised now, C7511, in a faster loop).
    auto release = [&] {
      if (lane == 0 && c > 0) kernels::mbarrier_arrive(&empty[previous.stage]);
    };
    auto refill = [&] {
      if (producer && c + kAhead < a.chunks) {
        if (c > 0) kernels::mbarrier_wait_parity(&empty[previous.stage], previous.parity);
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
        wgmma_half_chunk<Atom, kRows, decltype(n)::value>(smem_address(st), record, lane, acc, between);
      } else {
        const uint8_t* record = st + S::kActBytes + warp * gemv::kChunkBytes;
        wgmma_chunk<Atom, kRows, decltype(n)::value>(smem_address(st), record, lane, acc, between);
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
  // The whole chunks, kStages an iteration (wgmma_block.cuh).
  for_each_ring_chunk<kStages, S>(whole_chunks, path, [&](auto n, int c, int stage, uint32_t parity) {
    run_chunk(c, stage, parity, n, std::false_type{});
  });
  // The half chunk runs in a branch: every wgmma is retired on both of its sides, so ptxas sees no
  // accumulator moved while one is in flight (which would serialise every wgmma of the kernel, C7515).
  kernels::wgmma_wait<0>();
  kernels::wgmma_fence_operands(acc);
  if (whole_chunks < a.chunks) {
    with_path_width<S>(path, [&](auto n) {
      run_chunk(whole_chunks, whole_chunks % kStages, static_cast<uint32_t>(whole_chunks / kStages) & 1u, n,
                std::true_type{});
    });
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
  auto gemm1_store = mma::bf16_intermediate(
      a.out, [pitch, features = a.n / 2](int64_t row, int f) { return row * pitch + row_position(f, features); });
  if constexpr (kStagedEpilogue)
    mma::store_swap_rows<kGemm1>(epilogue, acc_tiles, tile.row0, tile.rows, my_tile, 0, g, t, gemm1_store,
                                 [my_bias = bias_rows[warp]](int, int j) { return mma::bf16_at(my_bias + j); },
                                 [](int r) { return row_weights[kGemm1 ? 0 : r]; });
  else
    mma::store_swap_rows<kGemm1>(epilogue, acc_tiles, expert, tile.row0, tile.rows, my_tile, 0, g, t, gemm1_store);
#else
  (void)a;
  __trap();
#endif
}

// The tile table's wgmma rows (kernels/tile_table.hpp) are these shapes.
static_assert(rows_are_kernels<kernels::TileFamily::Wgmma, WgShape>());

// f(kernel, rows) for each kernel of the table's wgmma rows that this build has (none in the minimal
// profile).
template <class F>
void for_each_variant(F&& f) {
  kernels::for_each_row<kernels::TileFamily::Wgmma>([&](auto i) {
    constexpr int rows = kernels::kRowOf<decltype(i)>.rows;
    f(wgmma_gemm_kernel<true, false, rows>, rows);
    f(wgmma_gemm_kernel<true, true, rows>, rows);
    f(wgmma_gemm_kernel<false, false, rows>, rows);
    f(wgmma_gemm_kernel<false, true, rows>, rows);
  });
}

}  // namespace

bool wgmma_built() {
  bool any = false;
  kernels::for_each_row<kernels::TileFamily::Wgmma>([&](auto) { any = true; });
  return any;
}

bool wgmma_rows_supported(int rows) { return kernels::tile_built(kernels::TileFamily::Wgmma, rows); }

size_t wgmma_smem_bytes(int rows) { return row_smem_bytes(kernels::TileFamily::Wgmma, rows, "wgmma"); }

// Whether the build's architectures include sm_90a (MXMOE_CUDA_ARCHS, e.g. "90a,120a,121a"): plain
// sm_90 code has no wgmma, and there the kernels are trap stubs.
static bool built_for_sm90a() {
  const std::string_view archs = MXMOE_CUDA_ARCHS;
  for (size_t at = archs.find("90a"); at != std::string_view::npos; at = archs.find("90a", at + 1))
    if (at == 0 || archs[at - 1] == ',') return true;
  return false;
}

bool wgmma_in_build() { return wgmma_built() && built_for_sm90a(); }

// wgmma is sm_90a only: a Hopper device, and the build's sm_90a image.
bool wgmma_runs(int device) {
  return wgmma_in_build() && variants_run_on(device, [](auto f) { for_each_variant(f); }, wgmma_smem_bytes);
}

void configure_wgmma() { allow_dynamic_smem([](auto f) { for_each_variant(f); }, wgmma_smem_bytes); }

template <bool kGemm1>
void launch_wgmma(const mma::MmaArgs& a, int64_t tokens, int max_active, int rows, cudaStream_t stream) {
  MXMOE_REQUIRE(wgmma_rows_supported(rows), "wgmma: rows must be one of this build's wgmma tiles (",
                kernels::built_rows_list(kernels::TileFamily::Wgmma), "), got ", rows);
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
  kernels::with_row<kernels::TileFamily::Wgmma>(rows, [&](auto i) {
    constexpr int kRows = kernels::kRowOf<decltype(i)>.rows;
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
