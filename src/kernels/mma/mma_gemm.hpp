#pragma once
// The tensor-core family (W4A16 through the Bf16Atom): a grouped GEMM over the experts that received
// tokens, for per-expert row counts where the GEMV family re-streams its weights too often. A block
// computes up to kBlockM(m_tiles) rows of one expert (tokens on the MMA's M) against kBlockN weight
// rows (on N), walking K in chunks of 128 through a 2-stage cp.async pipeline (chunk_pipeline.cuh).
//
// It reads the GEMV family's weight layout (gemv_layout.hpp) as it is: a 16-row weight tile's record
// gives lane (g, t) row g's and row g+8's MX block 4c+t, which is exactly the B fragment of two n8
// MMA groups once the activations are staged with the same K permutation (mma_gemm_kernel.cu). So the
// weights live on the device once for both families.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/common/grouped_args.hpp"
#include "kernels/tile_table.hpp"

namespace mxmoe::mma {

struct MmaArgs : kernels::GroupedWeights, kernels::GroupedRouting {
  const uint16_t* act = nullptr;     // GEMM1: hidden [T, H]; GEMM2: intermediate [rows, I] (permuted: swap_ab)
  void* out = nullptr;               // GEMM1: bf16 [rows, I]; GEMM2: fp32 [rows, H] (bf16: swap_ab and wgmma)
  bool wide_scales = false;          // some scale byte is > 128 or 0xFF: the general multiplier path
  bool swap_ab = false;              // the swap-AB tiles (weights on the MMA's M side): swap_gemm_kernel.cu
  // The swap-AB tiles, both GEMMs on the same tile: GEMM1 counts its blocks done per expert here
  // (zeroed before it, by the route: RoutingBuffers::zero_counts), and GEMM2 starts an expert's m-tiles once its count is
  // complete instead of waiting for GEMM1's whole grid. Null: the grid wait.
  int32_t* expert_done = nullptr;
  // The wgmma tiles: K % 128 == 64, so the activations' last chunk is in the half chunk's order
  // (sm90/chunk_order.hpp) and the tiles run it as one.
  bool half_tail = false;
};

inline constexpr int kBlockN = 256;      // weight rows per block of the register-decode tiles (8 warps x 32)
__host__ __device__ constexpr int block_m(int m_tiles) { return 16 * m_tiles; }

// A tile of the family: its rows of one expert (16 * m_tiles) and its form.
struct MmaTile {
  int m_tiles;
  bool swap_ab;
};
// Whether this build has the register-decode tile of m_tiles (the tile table's Mma rows: 16, 32 and
// 64 rows; the minimal profile has only 64).
inline bool m_tiles_supported(int m_tiles) { return kernels::tile_built(kernels::TileFamily::Mma, block_m(m_tiles)); }
// Whether this build has the swap-AB tile of m_tiles (the table's Swap rows: 16 to 128 rows; none in the
// minimal profile).
inline bool swap_supported(int m_tiles) { return kernels::tile_built(kernels::TileFamily::Swap, block_m(m_tiles)); }
// Whether this build has the tile in its form (the register-decode tile, or swap-AB).
inline bool tile_supported(const MmaTile& tile) {
  return tile.swap_ab ? swap_supported(tile.m_tiles) : m_tiles_supported(tile.m_tiles);
}

// The swap-AB tiles (swap_gemm_kernel.cu): 16 * m_tiles rows of one expert (m_tiles 1, 2, 4 or 8) on
// the MMA's N side in n8 groups, the weights on M: a warp runs only the groups that hold rows, and a
// B fragment is one shared-memory load because `act` arrives in the decode's pair order
// (permute_words.hpp; GEMM1 then writes GEMM2's input in that order too). 256 weight rows per block
// (128 for m_tiles 8, whose 8 warps split the rows in two halves of 64).
size_t swap_smem_bytes(int m_tiles);
bool swap_fits(size_t smem_per_block_optin);  // part of fits() and configure()
void configure_swap();
template <bool kGemm1>
void launch_swap(const MmaArgs& args, int64_t tokens, int max_active, int m_tiles, cudaStream_t stream);

// Dynamic shared memory of one block (its pipeline stages of activations and weights), and whether
// every tile (the swap-AB ones too) fits.
size_t smem_bytes(int m_tiles);
bool fits(size_t smem_per_block_optin);
// Lets every kernel variant use the device's opt-in shared memory (idempotent).
void configure(size_t smem_per_block_optin);

// GEMM1 + bias + clamped interleaved SwiGLU -> bf16 intermediate; GEMM2 + bias, times the routing
// weight -> rows for the combine: fp32, or bf16 from the swap-AB tiles (swap_epilogue.cuh). Launched with
// programmatic dependent launch.
void launch_gemm1(const MmaArgs& args, int64_t tokens, int max_active, int m_tiles, cudaStream_t stream);
void launch_gemm2(const MmaArgs& args, int64_t tokens, int max_active, int m_tiles, cudaStream_t stream);

}  // namespace mxmoe::mma
