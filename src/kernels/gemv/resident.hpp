#pragma once
// The GEMV family's decode stream (T <= kResidentMaxTokens, routed locally, the combine fused): one
// persistent kernel, one block per SM. Each block streams its share of GEMM1's tiles through per-warp
// rings while its share of GEMM2's weights lands in its shared memory from the kernel's first cycle;
// once every block has stored its GEMM1 rows (a count across the grid), GEMM2 runs from shared memory
// and the last split of each column tile to finish sums that tile's outputs. One stream of weight bytes
// for both GEMMs: no second launch, no second ramp, no gap between the GEMMs (docs/perf/gemv.md).
//
// The sums are the GEMV kernels' own: GEMM1's and GEMM2's split-K partials in split order, the bias,
// the routing weight, the pairs in slot order. So a resident plan gives the bits of the two-kernel GEMV
// plan with the same split-K (a GPU test holds it to that).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/gemv/gemv.hpp"
#include "layout/gemv_layout.hpp"

namespace mxmoe::gemv {

inline constexpr int kResidentWarps = 16;
// The largest T the plan runs resident: GEMM2's weights of T * k experts must fit the SMs' shared memory
// (gpt-oss at T = 1: 17.7 MB against 132 SMs x 227 KB on an H100 or H200).
inline constexpr int64_t kResidentMaxTokens = 2;
// GEMM1's units (a tile's split) a warp holds in registers until its block may store them (after the
// wait for the previous kernel): at most this many per warp.
inline constexpr int kResidentMaxRounds = 4;
// The combine holds every partial of a token's output column in registers: k * GEMM2's split-K at most.
inline constexpr int kResidentMaxPartials = 16;
// GEMM2 (slot, tile) pairs a block holds units of, at most (their counts are taken at once).
inline constexpr int kResidentMaxEntries = 64;

// What the planner and the launcher both compute for a layer at T tokens on `blocks` SMs.
struct ResidentShape {
  PackedShape w1, w2;  // GEMM1's and GEMM2's packed shapes (gemv_layout.hpp)
  int64_t tokens = 0;
  int slots = 0;       // expert slots at most (min(E, T * k))
  int blocks = 0;      // one per SM
  int top_k = 4;
  int ksplit1 = 4, ksplit2 = 4;
};

// Dynamic shared memory of one block: the tokens' staged rows, the warps' rings, GEMM2's resident units.
size_t resident_smem_bytes(const ResidentShape& s);
// Whether the resident kernel runs this shape in `smem_per_block` bytes next to `static_smem`, and why not.
// Empty: it does.
const char* resident_misfit(const ResidentShape& s, size_t smem_per_block, size_t static_smem);
// The fp32 partials of GEMM2's units (workspace bytes) for up to `tokens` tokens of top-k routing.
size_t resident_partial_bytes(int hidden, int64_t tokens, int top_k, int ksplit2);
// Counters the kernel uses: one for the grid's GEMM1 count, one per GEMM2 column tile.
inline int resident_counters_needed(int hidden) { return 1 + (hidden + kTileRows - 1) / kTileRows; }
// The largest static shared memory of the resident kernel's variants (needs a CUDA context).
size_t resident_static_smem_bytes();
// Lets the kernel use the device's opt-in shared memory (idempotent).
void configure_resident(size_t smem_per_block_optin);

struct ResidentArgs {
  int32_t* counters = nullptr;  // resident_counters_needed(H), cleared by the launch's first kernel
  float* partials = nullptr;    // resident_partial_bytes
  uint16_t* out = nullptr;      // bf16 [T, H]
  int blocks = 0;               // the plan's: one per SM
  bool gemm2 = true;            // false: stop after GEMM1's stores (bench --stages)
};

// Clears the counters (a one-block kernel that waits for the previous kernel), then the resident kernel.
// gemm1 and gemm2 are the two GEMMs' arguments as launch_gemm1/launch_gemm2 take them, routed locally
// (logits or ids set), 8-row batches, the default ring.
void launch_resident(const GemvArgs& gemm1, const GemvArgs& gemm2, const ResidentArgs& r, int64_t tokens,
                     int max_active, cudaStream_t stream);

}  // namespace mxmoe::gemv
