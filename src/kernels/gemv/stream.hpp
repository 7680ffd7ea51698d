#pragma once
// The streamed decode kernel of the GEMV family (T <= kStreamMaxTokens): the whole layer in one
// launch. Every block routes the tokens itself, then walks a fixed list of work items: first every
// GEMM1 item (slot, group of 16-row tiles), then every GEMM2 item, item i on block i % blocks. A
// GEMM2 item waits for its slot's GEMM1 items on a counter (not for a whole grid), its weights already
// requested into the block's rings while the previous item finished, and the last GEMM2 item of each
// column group does the combine. The weight stream never stops at a kernel boundary, and GEMM2's
// bytes move while GEMM1's last items are computed. Same tiles, chunk order and sums as the per-GEMM
// kernels: the same bits.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/gemv/gemv.hpp"
#include "mxmoe/config.hpp"

namespace mxmoe::gemv {

struct StreamArgs {
  GemvArgs g1, g2;  // GEMM1's and GEMM2's arguments; the routing (logits, top-k, order) is read from g1
  // The kernel's counters (stream_counter_count): GEMM1 items done per slot, then GEMM2 items done
  // per column group. A one-block kernel launched before it clears them every forward.
  int32_t* counters = nullptr;
  int tiles_per_item1 = 8, tiles_per_item2 = 8;  // 16-row tiles per item (8 warps: K split 8 / that)
  int phases = 3;                                // 1: GEMM1 items only, 2: and GEMM2's, 3: and the combine
};

// The largest T the kernel serves, and the expert slots it handles at most (T * k).
inline constexpr int64_t kStreamMaxTokens = 2;
inline constexpr int kMaxStreamSlots = static_cast<int>(kStreamMaxTokens) * kMaxTopk;
inline int stream_counter_count(int hidden) { return kMaxStreamSlots + combine_counters_needed(hidden); }

struct StreamPlan {
  int tiles_per_item1 = 8, tiles_per_item2 = 8;
  int blocks = 0;
};
// Launches the clearing of the counters and the kernel (both with programmatic dependent launch).
// Items sized so that both GEMMs have about as many items as the grid has blocks, the grid no larger
// than what is resident at once (`resident_blocks`), for `slots` expert slots. forced_ksplit (1, 2, 4
// or 8; MXMOE_GEMV_KSPLIT) fixes both GEMMs' K split, as it does for the per-GEMM kernels.
StreamPlan plan_stream(int tiles1, int tiles2, int slots, int resident_blocks, int forced_ksplit = 0);

// Blocks of the kernel resident on the device at once, for K1/K2 (H, I), T tokens and the ring depth
// (needs a CUDA context; configure_stream first). 0: it does not fit.
int stream_resident_blocks(int k1, int k2, int tokens, int stages, int sm_count);
// Lets the kernel use the device's whole opt-in shared memory (idempotent).
void configure_stream(size_t smem_per_block_optin);
// Whether this build has the kernel for a ring depth.
bool stream_stages_built(int stages);

void launch_stream(const StreamArgs& args, int tokens, const StreamPlan& plan, cudaStream_t stream);

}  // namespace mxmoe::gemv
