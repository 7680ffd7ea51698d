// The resident decode kernel's shapes (resident.hpp): what the planner checks and the launcher sizes,
// computed in one place. Host only.
#include "kernels/gemv/resident.hpp"

#include <algorithm>

#include "kernels/gemv/resident_layout.hpp"

namespace mxmoe::gemv {

ResidentLayout resident_layout(const ResidentShape& s) {
  const auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  ResidentLayout l;
  const int64_t blocks = std::max(s.blocks, 1);
  l.rows_cap = static_cast<int>(std::clamp<int64_t>(s.tokens, 1, 8));
  l.items1 = ceil_div(int64_t{s.slots} * s.w1.tiles, blocks);
  l.rounds1 = ceil_div(l.items1 * s.ksplit1, kResidentWarps);
  l.units2 = ceil_div(int64_t{s.slots} * s.w2.tiles * s.ksplit2, blocks);
  l.unit_stride = ceil_div(s.w2.chunks, s.ksplit2) * kChunkBytes;
  l.ring_offset = act_bytes(static_cast<int>(s.w1.chunks), l.rows_cap);
  l.resident_offset = l.ring_offset + kResidentRingBytes;
  l.stage2_bytes = act_bytes(static_cast<int>(s.w2.chunks), l.rows_cap);
  l.total = l.resident_offset + l.units2 * l.unit_stride;
  return l;
}

size_t resident_smem_bytes(const ResidentShape& s) { return static_cast<size_t>(resident_layout(s).total); }

const char* resident_misfit(const ResidentShape& s, size_t smem_per_block, size_t static_smem) {
  const ResidentLayout l = resident_layout(s);
  if (s.tokens < 1 || s.tokens > kResidentMaxTokens) return "T is outside 1..2";
  if (s.blocks < 1) return "no SMs";
  if (s.top_k * s.ksplit2 > kResidentMaxPartials) return "k x GEMM2's split-K exceeds the combine's registers";
  if (l.units2 / s.ksplit2 + 2 > kResidentMaxEntries) return "a block holds too many GEMM2 tiles";
  if (l.rounds1 > kResidentMaxRounds) return "GEMM1's tiles per SM exceed what the warps hold in registers";
  // GEMM2's rows of the (at most two) slots a block's units touch are staged where the rings were.
  if (l.units2 > s.w2.tiles * s.ksplit2) return "a block's GEMM2 units span more than two expert slots";
  if (2 * l.stage2_bytes > kResidentRingBytes) return "GEMM2's staged rows do not fit the rings' space";
  if (static_cast<size_t>(l.total) + static_smem > smem_per_block) return "GEMM2's share per SM does not fit shared memory";
  return nullptr;
}

size_t resident_partial_bytes(int hidden, int64_t tokens, int top_k, int ksplit2) {
  const int64_t t = std::clamp<int64_t>(tokens, 0, kResidentMaxTokens);
  const int64_t tiles = (hidden + kTileRows - 1) / kTileRows;
  return static_cast<size_t>(t * top_k * tiles * ksplit2 * t * kTileRows * 4);
}

}  // namespace mxmoe::gemv
