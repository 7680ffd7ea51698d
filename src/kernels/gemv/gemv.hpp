#pragma once
// The GEMV family: W4A16 grouped GEMV over the experts that received tokens, in swap-AB form (weights
// on the MMA's M side). Weights stream once per batch of 8 or 16 rows of an expert (the MMA's N, one
// or two MMAs per decoded fragment); activations are read straight from the token (GEMM1) or the
// intermediate (GEMM2), never copied by an expand step.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/common/grouped_args.hpp"

namespace mxmoe::gemv {

struct GemvArgs : kernels::GroupedWeights, kernels::GroupedRouting {
  const uint16_t* act = nullptr;     // GEMM1: hidden [T, H]; GEMM2: intermediate [rows, I]
  void* out = nullptr;               // GEMM1: bf16 [rows, I]; GEMM2: fp32 [rows, H]
  int ksplit = 1;                    // split-K: 1, 2, 4 or 8 warps share a tile's K (8-row batches; the plan's)
  int stages = 2;                    // weight ring stages: kDefaultStages, or the plan's
  bool wide_scales = false;          // some scale byte is > 128 or 0xFF: the general multiplier path
  int batch_rows = 8;                // rows of an expert per weight pass: 8, or kWideBatchRows (2 stages, no split-K)
  int tokens = 0;                     // T (the launchers set it)
  // Local routing (T <= kMaxLocalRouteTokens, both GEMMs, no route kernel): the router logits [T, E]
  // fp32 and the routing order, or the engine's ids [T, k] (int32, or int64 with ids64) and weights
  // [T, k] fp32 as given (common/routed_pairs.cuh); both null: the route kernel's results. The launchers
  // set local_route.
  const float* logits = nullptr;  // (the experts: GroupedWeights::experts)
  bool softmax_first = false, renormalize = false;
  const void* topk_ids = nullptr;
  bool ids64 = false;
  const float* topk_weights = nullptr;
  bool local_route = false;
  // The combine in GEMM2 (T <= kFusedCombineTokens): GEMM1 clears `combine_counters` (one per GEMM2
  // column group, combine_counter_count of them); the last GEMM2 block of each column group to finish
  // sums every token's k rows in slot order into `combine_out` (bf16 [T, H]). Null: no combine.
  int32_t* combine_counters = nullptr;
  int combine_counter_count = 0;
  uint16_t* combine_out = nullptr;
  // GEMM2 counted (route kernel, no fused combine): GEMM1's blocks count themselves done per expert
  // slot here (zeroed by the route), and a GEMM2 block starts once its slot's count reaches
  // gemm1_blocks_per_slot instead of waiting for GEMM1's whole grid. Null: the grid wait.
  int32_t* slot_done = nullptr;
  int gemm1_blocks_per_slot = 0;
  // GEMM2's combine through a thread-block cluster of a column group's expert slots (the plan decides
  // where it applies: cluster_combine_valid); false: through a count in L2.
  bool cluster_combine = false;
  const int32_t* pair_row = nullptr;  // pair -> sorted row (route kernel), read by the fused combine
  int32_t* pair_row_out = nullptr;    // GEMM2 routed locally without the combine: writes pair -> row here
};

// Up to this T both GEMMs can route the tokens themselves (every block repeats the top-k of T tokens)
// and no route kernel runs (the launchers route locally when args.logits or args.topk_ids is set); GEMM2
// can also do the combine (its last block per column group) up to kFusedCombineTokens, and then no
// combine kernel runs. Where the runner does either is the planner's choice (plan/preferences.hpp, docs/perf/gemv.md).
inline constexpr int64_t kMaxLocalRouteTokens = 4;
inline constexpr int64_t kFusedCombineTokens = 8;
// GEMM2's combine can go through a thread-block cluster of a column group's expert slots instead of a
// count in L2 (cluster_combine.cuh) when routed locally with the combine in GEMM2, with 8-row batches
// and the default ring, and T * k <= kClusterSlots (the slots, at most T * k, form the cluster, and rank
// 0's buffer holds every pair's row). H100, gpt-oss-120b (docs/perf/gemv.md): clusters of 4 (T = 1)
// 26.0 -> 25.5 us, of 8 (T = 2) 44.7 -> 51.0, so at most 4.
inline constexpr int kClusterSlots = 4;
bool cluster_combine_valid(int batch_rows, int stages, int64_t tokens, int top_k, bool local_route, bool fused_combine);
// GEMM2's column groups, at most: the size of the combine counters.
inline int combine_counters_needed(int hidden) { return (hidden + 15) / 16; }

// Dynamic shared memory one block needs for K (8 activation rows, permuted and padded, and the
// weight rings of `stages` stages).
size_t smem_bytes(int k, int stages);
// Weight ring stages per warp: 2 by default on every device. Measured on an H200 (docs/perf-log.md),
// 2 stages beat 3 at decode sizes (T = 1: 30.9 vs 32.1 us; T = 4: 81.3 vs 89.3 us; T = 16 equal),
// and 2 is what fits SM120/SM121's 99 KB at gpt-oss's K. 3 can be forced where it fits.
inline constexpr int kDefaultStages = 2;
// Whether this build has the kernels of a ring depth (the minimal profile has only the default).
#if defined(MXMOE_MINIMAL)
inline constexpr bool stages_built(int stages) { return stages == kDefaultStages; }
#else
inline constexpr bool stages_built(int stages) { return stages == 2 || stages == 3; }
#endif
// The wide batch: 16 rows of an expert per pass over its weights (16 warps per block, one block per
// SM at gpt-oss's K). Built in the full profile only.
inline constexpr int kWideBatchRows = 16;
#if defined(MXMOE_MINIMAL)
inline constexpr bool batch_rows_built(int rows) { return rows == 8; }
#else
inline constexpr bool batch_rows_built(int rows) { return rows == 8 || rows == kWideBatchRows; }
#endif
// Whether the wide batch's staged rows and rings fit next to the static shared memory at K (Hopper's
// 227 KB: yes for gpt-oss; SM120/SM121's 99 KB: no at K = 2880).
bool wide_batch_fits(int k, size_t smem_per_block_optin, size_t static_smem);
// Whether a ring of `stages` fits next to the static shared memory at K on a device.
bool stages_fit(int k, int stages, size_t smem_per_block_optin, size_t static_smem);
// Largest K the family supports (with 2 stages) on a device.
int max_k(size_t smem_per_block_optin, size_t static_smem);
// The largest static shared memory of the kernel variants (needs a CUDA context).
size_t static_smem_bytes();
// Lets every kernel variant use the device's whole opt-in shared memory (idempotent, per device).
void configure(size_t smem_per_block_optin);

// Launches use programmatic dependent launch: each kernel waits for its predecessor in-kernel, so
// its launch overlaps the predecessor's tail.
// GEMM1 + bias + clamped interleaved SwiGLU -> bf16 intermediate.
void launch_gemm1(const GemvArgs& args, int64_t tokens, int max_active, cudaStream_t stream);
// GEMM2 + bias, times the routing weight -> fp32 rows for the combine (and the combine itself when
// args.combine_out is set).
void launch_gemm2(const GemvArgs& args, int64_t tokens, int max_active, cudaStream_t stream);
// GEMM1's blocks per expert slot for these arguments (GemvArgs::gemm1_blocks_per_slot).
int blocks_per_slot(const GemvArgs& args, int64_t tokens, int max_active);

}  // namespace mxmoe::gemv
