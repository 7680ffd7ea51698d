// The planner (planner.hpp): candidates from the build and the caps, the measured preferences and
// the GEMV split-K cost model, and the comparison per forward.
#include "plan/planner.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "common/m_tiles_bound.hpp"
#include "kernels/gemv/gemv.hpp"
#include "layout/gemv_layout.hpp"
#include "kernels/mma/mma_gemm.hpp"
#include "kernels/mma/mx_gemm.hpp"
#include "kernels/sm90/wgmma_fp8_gemm.hpp"
#include "kernels/sm90/wgmma_gemm.hpp"
#include "mxmoe/error.hpp"
#include "mxmoe/runner.hpp"
#include "plan/preferences.hpp"
#include "plan/tile_rows.hpp"

namespace mxmoe::plan {
namespace {

// m16 tiles and form of a forced tensor-core tile.
int m_tiles_of(const MmaTileChoice& t) { return t.rows / 16; }

}  // namespace

// The tile table's rows (kernels/tile_table.hpp) that this build has and that run on the caps'
// architecture, each with its dynamic shared memory next to the static allowance.
Fits fits_for_caps(const DeviceCaps& caps) {
  using kernels::TileFamily;
  const uint8_t arch = kernels::arch_of(caps.cc_major, caps.cc_minor);
  auto fit = [&](TileFamily family) {
    return kernels::rows_fit(family, arch, caps.smem_per_block, kTileStaticSmemAllowance);
  };
  Fits f;
  f.mma = kernels::rows_on(TileFamily::Mma, arch) > 0 && fit(TileFamily::Mma) && fit(TileFamily::Swap);
  f.wgmma = caps.wgmma && sm90::wgmma_in_build() && kernels::rows_on(TileFamily::Wgmma, arch) > 0 &&
            fit(TileFamily::Wgmma);
  f.mx = kernels::rows_on(TileFamily::Mx, arch) > 0 && fit(TileFamily::Mx);
  f.wgmma_fp8 = caps.wgmma && sm90::wgmma_in_build() && kernels::rows_on(TileFamily::WgmmaFp8, arch) > 0 &&
                fit(TileFamily::WgmmaFp8);
  return f;
}

Backend auto_backend_for(Precision precision, const DeviceCaps& caps) {
  if (precision != Precision::Fp8) return Backend::Auto;
  if (caps.block_scaled_mma) return Backend::Mx;
  if (!caps.wgmma && caps.fp8_mma_sync) return Backend::MxEmulated;
  return Backend::Auto;
}

// Split K over more warps when the grid would otherwise leave SMs idle or unevenly loaded: at decode
// sizes the busiest SM's bytes, not total bandwidth, set the time. The smallest split whose blocks
// fill the resident slots (within 10%) wins: longer K ranges per warp keep its ring full, and more
// splits only add reduction work (H200, docs/perf/: gpt-oss-120b T = 3 took 64.0 us with GEMM2 split
// 4 ways, 61.1 with 1). Below that, a cost model: blocks on the busiest SM x (weight bytes per block +
// a fixed per-block cost for staging and the reduction). The resident blocks per SM: the GEMV kernels'
// launch bound (gemv_block.cuh, min_blocks_for) of 3 where an SM's shared memory holds them at decode
// sizes (Hopper's 228 KB, A100's 164 KB), 2 in 100 KB (SM120/SM121, SM86/SM89).
int choose_gemv_ksplit(const DeviceCaps& caps, int tiles, int chunks, int max_active) {
  constexpr int kWarps = 8;  // warps of an 8-row-batch block (gemv_block.cuh, warps_for(1))
  constexpr int64_t kBlockOverheadBytes = 8192;
  const int resident_per_sm = caps.smem_per_sm > 128 * 1024 ? 3 : 2;
  const int64_t sms = caps.sm_count;
  const auto blocks_at = [&](int ksplit) {
    const int tiles_per_block = kWarps / ksplit;
    return static_cast<int64_t>((tiles + tiles_per_block - 1) / tiles_per_block) * max_active;
  };
  for (int ksplit = 1; ksplit <= kWarps; ksplit *= 2)
    if (blocks_at(ksplit) * 10 >= int64_t{resident_per_sm} * sms * 9) return ksplit;
  int best = 1;
  int64_t best_cost = INT64_MAX;
  for (int ksplit = 1; ksplit <= kWarps; ksplit *= 2) {
    const int64_t per_sm = (blocks_at(ksplit) + sms - 1) / sms;
    const int64_t cost = per_sm * (int64_t{kWarps / ksplit} * chunks * gemv::kChunkWeightBytes + kBlockOverheadBytes);
    if (cost < best_cost) best = ksplit, best_cost = cost;
  }
  return best;
}

// The 192-row W4A8 tile from this many rows per expert: an expert of 129 to 192 rows is one m-tile
// there, two (one nearly empty, each decoding every weight) in the 128-row tile; below that the 128-row
// tile's 16 warps are faster. Forced on an H200 (2026-11-28_h200_fp8_wide_tile.txt), us, 128 / 192 rows:
// gpt-oss-120b T = 2048 (64 rows) 1108 / 1263, 3072 (96) 1226 / 1402, 3584 (112) 1346-1353 / 1473, 3840
// (120) 1445-1464 / 1505-1511, 4096 (128) 1666 / 1542; 20b T = 512 (64) 276 / 342, 1024 (128) 444 / 403,
// 4096 (512) 1331 / 1242.
constexpr int kFp8WideTile = 192;
constexpr double kFp8WideTileRows = 124;

// Split the W4A8 tiles' K where a GEMM's blocks leave resident slots empty (gpt-oss-120b at T = 1: 92 and
// 48 blocks of the 32-row tile on 264 slots). The largest power-of-two split whose blocks still run in one
// wave, at most kMaxSplits and 2 chunks a split: a second, partial wave costs a whole block's time. Forced
// sweeps on an H200 at T = 1, us, GEMM1 / GEMM2 (`bench --stages`; docs/fp8.md): with GEMM2's quantiser
// pass (before 49ba16c) 1 way 25.9 / 24.3, 2 ways 24.8 / 18.0, 4 ways 26.7 (two waves) / 17.1, 8 ways 36.6 /
// 22.1 (both two waves); without it 25.4 / 33.2, 24.2 / 20.5, 26.3 / 14.7, 36.4 / 18.9, and GEMM2 at 5 ways
// (the rule's pick before powers of two) 17.2. This rule picks 2 / 4.
int choose_fp8_splits(const DeviceCaps& caps, int rows, int64_t tile_sets, int chunks) {
  const int64_t slots = int64_t{caps.sm_count} * sm90::wgmma_fp8_blocks_per_sm(rows);
  if (tile_sets <= 0) return 1;
  const int64_t most = std::min<int64_t>(sm90::kMaxSplits, std::max(chunks / 2, 1));
  const int64_t fit = std::clamp<int64_t>(slots / tile_sets, 1, most);
  int splits = 1;
  while (2 * splits <= fit) splits *= 2;
  return splits;
}

Planner::Planner(PlannerInput input) : in_(std::move(input)) {
  const DeviceCaps& c = in_.caps;
  const PlanOverride& f = in_.force;
  const MoeConfig& cfg = in_.config;
  const Backend b = in_.backend;
  MXMOE_REQUIRE(in_.routed_experts == 0 || in_.routed_experts >= cfg.num_experts, "routed_experts: expected 0 or ",
                "at least the layer's ", cfg.num_experts, " experts, got ", in_.routed_experts);
  MXMOE_REQUIRE(b == Backend::Auto || b == Backend::Gemv || b == Backend::Mma || backend_uses_mxfp8(b), "backend: '",
                to_string(b), "' is not a GPU backend");
  const size_t room = c.smem_per_block, static_smem = c.gemv_static_smem;
  const int k_max = gemv::max_k(room, static_smem);
  MXMOE_REQUIRE(cfg.hidden <= k_max, "hidden: ", cfg.hidden, " is above the GEMV family's limit of ", k_max, " on ",
                c.name);
  MXMOE_REQUIRE(cfg.intermediate <= k_max, "intermediate: ", cfg.intermediate, " is above the GEMV family's limit of ",
                k_max, " on ", c.name);
  // The GEMV ring depth.
  stages_ = gemv::kDefaultStages;
  if (f.gemv_stages) {
    MXMOE_REQUIRE(gemv::stages_built(*f.gemv_stages), "MXMOE_PLAN stages=", *f.gemv_stages,
                  ": not built in this (minimal) profile; it has ", gemv::kDefaultStages);
    for (const int k : {cfg.hidden, cfg.intermediate})
      MXMOE_REQUIRE(gemv::stages_fit(k, *f.gemv_stages, room, static_smem), "MXMOE_PLAN stages=", *f.gemv_stages,
                    ": does not fit the shared memory of ", c.name, " at K = ", k);
    stages_ = *f.gemv_stages;
  }
  // The MX backends' device requirements.
  if (backend_uses_mxfp8(b)) {
    const mma::MxAtom atom = b == Backend::Mx ? mma::MxAtom::Native : mma::MxAtom::Emulated;
    MXMOE_REQUIRE(mma::mx_supported(atom, c.cc_major, c.cc_minor), "backend: '", to_string(b), "' needs ",
                  b == Backend::Mx ? "an SM120/SM121 GPU (compute capability 12.x)" : "compute capability 8.9 or newer",
                  ", ", c.name, " runs ", c.cc_major, ".", c.cc_minor, " code");
    MXMOE_REQUIRE(in_.fits.mx, "backend: '", to_string(b), "' needs ", mma::mx_smem_bytes(),
                  " bytes of shared memory per block; ", c.name, " allows ", room);
  }
  // The GEMV family's 16-row batch where its staged rows fit and the ring has the default depth.
  wide_batch_ok_ = stages_ == gemv::kDefaultStages && gemv::wide_batch_fits(cfg.hidden, room, static_smem) &&
                   gemv::wide_batch_fits(cfg.intermediate, room, static_smem);
  if (!wide_batch_ok_) notes_.push_back("gemv 16-row batch: not built, not at this ring depth, or does not fit");
  MXMOE_REQUIRE(f.gemv_batch_rows.value_or(8) != gemv::kWideBatchRows || wide_batch_ok_, "MXMOE_PLAN batch=16: ",
                "needs the full build profile, ", gemv::kDefaultStages, " ring stages and room for 16 staged rows of K = ",
                std::max(cfg.hidden, cfg.intermediate), " in ", c.name, "'s shared memory (", room, " bytes per block)");
  local_route_tokens_ = f.local_route_tokens.value_or(kDefaultLocalRouteTokens);
  fused_combine_tokens_ = f.fused_combine_tokens.value_or(kDefaultFusedCombineTokens);
  cluster_combine_ = f.cluster_combine.value_or(true) && c.clusters;
  if (!c.clusters) notes_.push_back("gemv cluster combine: no thread-block clusters on " + c.name);
  // The tensor-core families.
  if (!in_.fits.mma) notes_.push_back("mma family: its tiles do not fit " + std::to_string(room) + " bytes per block");
  MXMOE_REQUIRE(in_.fits.mma || b != Backend::Mma, "backend: 'mma' needs ", mma::smem_bytes(4),
                " bytes of shared memory per block; ", c.name, " allows ", room);
  wgmma_ok_ = in_.fits.mma && in_.fits.wgmma;
  // fp8 under auto: the W4A8 tiles (the mx backends are MXFP8 themselves; resolve_backend sends an
  // SM120/SM121 plan there).
  MXMOE_REQUIRE(in_.precision == Precision::Bf16 || backend_uses_mxfp8(b) || b == Backend::Auto, "precision: 'fp8' needs backend ",
                "auto, mx or mx-emulated; '", to_string(b), "' is W4A16 only");
  MXMOE_REQUIRE(in_.precision == Precision::Bf16 || backend_uses_mxfp8(b) || in_.fits.wgmma_fp8, "precision: 'fp8' on ", c.name,
                " needs the W4A8 wgmma tiles (a compute capability 9.0 GPU and a build with sm_90a in its full ",
                "profile), or FP8 mma.sync for the MXFP8 path (SM89 code: backend mx-emulated; SM120/SM121: mx)");
  if (!wgmma_ok_)
    notes_.push_back(c.wgmma ? "wgmma tiles: not in this build (sm_90a, full profile) or do not fit"
                             : "wgmma tiles: no wgmma on " + c.name);
  if (f.mma_tile) {
    const MmaTileChoice t = *f.mma_tile;
    const std::string key = "MXMOE_PLAN mma=" + to_string(t);
    switch (t.form) {
      case MmaForm::Plain:
        MXMOE_REQUIRE(mma::m_tiles_supported(m_tiles_of(t)), key, ": not built in this (minimal) profile");
        break;
      case MmaForm::SwapAb:
        MXMOE_REQUIRE(mma::swap_supported(m_tiles_of(t)), key, ": the swap-AB tiles are not built in this (minimal) profile");
        break;
      case MmaForm::Wgmma:
        MXMOE_REQUIRE(wgmma_ok_, key, ": the wgmma tiles need a compute capability 9.0 GPU and a build with sm_90a ",
                      "in its full profile");
        MXMOE_REQUIRE(f.wgmma.value_or(true), key, ": contradicts wgmma=0");
        break;
      case MmaForm::WgmmaFp8:
        MXMOE_REQUIRE(in_.precision == Precision::Fp8 && !backend_uses_mxfp8(b), key, ": a W4A8 tile, for precision fp8 ",
                      "(backend auto) only");
        MXMOE_REQUIRE(kernels::tile_built(kernels::TileFamily::WgmmaFp8, t.rows), key,
                      ": not built in this (minimal) profile");
        break;
    }
    MXMOE_REQUIRE(t.form == MmaForm::WgmmaFp8 || in_.precision == Precision::Bf16 || backend_uses_mxfp8(b), key,
                  ": a W4A16 tile; precision fp8 runs the fp8wgmma tiles");
  }
  if (in_.tune && !in_.tune->matches(c.name, std::to_string(c.cc_major) + "." + std::to_string(c.cc_minor), cfg)) {
    notes_.push_back("tune table: for another device or shape (" + in_.tune->device + "), ignored");
    in_.tune.reset();
  }
}

double Planner::rows_per_expert(int64_t tokens) const {
  // An expert-parallel rank receives about E_local / E of the pairs (the rest arrive dropped): planned as
  // if all T * k were local, its tiles were bigger than one GPU's for the same rows (docs/multi-gpu.md).
  const double share = in_.routed_experts > 0 ? static_cast<double>(in_.config.num_experts) / in_.routed_experts : 1.0;
  const double pairs = static_cast<double>(tokens * in_.config.top_k) * share;
  return pairs == 0 ? 0.0 : pairs / std::min(static_cast<double>(in_.config.num_experts), std::max(pairs, 1.0));
}

// The tensor-core family when forced (the mma backend), or, under Auto where its tiles fit, where
// the tune table or the preference table says so.
bool Planner::uses_tensor_cores(double rows) const {
  if (in_.backend == Backend::Mma) return true;
  if (in_.backend != Backend::Auto || !in_.fits.mma) return false;
  if (in_.tune) return in_.tune->plan_for(rows).mma;
  const auto table = tile_preferences(wgmma_ok_ && in_.force.wgmma.value_or(true));
  Family family = table.front().family;
  for (const TilePreference& p : table)
    if (rows >= p.min_rows) family = p.family;
  return family != Family::Gemv;
}

// The tensor-core tile: forced, else the tune table's (where this build has it and it runs here), else
// the preference table's row for these rows (its first tensor-core row below that), else, where the
// build lacks that tile (the minimal profile), the 64-row register-decode tile every build has.
void Planner::choose_tile(double rows, Plan& p) const {
  const bool wgmma_allowed = wgmma_ok_ && in_.force.wgmma.value_or(true);
  auto set = [&](Family family, int m_tiles, bool swap_ab) {
    p.family = family, p.m_tiles = m_tiles, p.swap_ab = swap_ab;
  };
  if (const auto& t = in_.force.mma_tile) {
    set(t->form == MmaForm::Wgmma ? Family::Wgmma : Family::Mma, m_tiles_of(*t), t->form == MmaForm::SwapAb);
    return;
  }
  if (in_.tune) {
    const TunePlan& t = in_.tune->plan_for(rows);
    p.from_tune_table = true;
    if (t.mma && t.wgmma && wgmma_allowed) return set(Family::Wgmma, t.m_tiles, false);
    if (t.mma && !t.wgmma && mma::tile_supported({t.m_tiles, t.swap_ab}) && (t.swap_ab || t.m_tiles != 8))
      return set(Family::Mma, t.m_tiles, t.swap_ab);
    p.from_tune_table = false;
  }
  const TilePreference* pick = nullptr;
  for (const TilePreference& row : tile_preferences(wgmma_allowed))
    if (row.family != Family::Gemv && (pick == nullptr || rows >= row.min_rows)) pick = &row;
  if (pick->family == Family::Mma && !mma::tile_supported({pick->m_tiles, pick->swap_ab})) return set(Family::Mma, 4, false);
  set(pick->family, pick->m_tiles, pick->swap_ab);
}

// The W4A8 tiles at every T (the precision fixes the numerics, not the batch): the bf16 wgmma rows of
// the preference table (preferences.cpp), the narrowest one below them, and the 192-row tile (12 warps,
// no bf16 twin) from kFp8WideTileRows rows per expert. A forced sweep on an H200 found them the fastest
// W4A8 tile at each T (docs/fp8.md).
void Planner::choose_fp8_tile(int64_t tokens, double rows, Plan& p) const {
  p.family = Family::WgmmaFp8;
  if (const auto& forced = in_.force.mma_tile) {  // checked at construction: an fp8 tile this build has
    p.m_tiles = forced->rows / 16;
  } else {
    const TilePreference* pick = nullptr;
    for (const TilePreference& row : tile_preferences(true))
      if (row.family == Family::Wgmma && (pick == nullptr || rows >= row.min_rows)) pick = &row;
    int tile = 16 * pick->m_tiles;
    if (rows >= kFp8WideTileRows && kernels::tile_built(kernels::TileFamily::WgmmaFp8, kFp8WideTile)) tile = kFp8WideTile;
    p.m_tiles = (kernels::tile_built(kernels::TileFamily::WgmmaFp8, tile) ? tile : 32) / 16;
  }
  // Split-K per GEMM, in the tile that has it: the launch's blocks are its possible m-tiles x weight
  // blocks of the tile's weight rows (wgmma_fp8_gemm_kernel.cu); MXMOE_PLAN ksplit= forces both (the
  // other tiles ignore it, as the GEMV's 16-row batches do).
  const MoeConfig& cfg = in_.config;
  const int rows_per_block = 16 * p.m_tiles;
  p.ksplit1 = p.ksplit2 = 1;
  if (!sm90::wgmma_fp8_splits_built(rows_per_block)) return;
  const int64_t m_blocks = routing::m_tiles_bound(tokens * cfg.top_k, p.max_active, rows_per_block);
  // The records' shape (as the GEMV plan reads it): 16-row tiles, the tile's weight rows a block.
  const int64_t tiles_per_block = kernels::kTileTable[row_of(p)].weight_rows / gemv::kTileRows;
  const auto splits = [&](const gemv::PackedShape& w) {
    const int64_t weight_blocks = (w.tiles + tiles_per_block - 1) / tiles_per_block;
    const int chunks = static_cast<int>(w.chunks);
    if (const auto& forced = in_.force.gemv_ksplit) return std::min(*forced, chunks);
    return choose_fp8_splits(in_.caps, rows_per_block, m_blocks * weight_blocks, chunks);
  };
  p.ksplit1 = splits(gemv::packed_shape(2 * int64_t{cfg.intermediate}, cfg.hidden / 32));
  p.ksplit2 = splits(gemv::packed_shape(cfg.hidden, cfg.intermediate / 32));
}

void Planner::choose_gemv(int64_t tokens, double rows, Plan& p) const {
  const PlanOverride& f = in_.force;
  p.family = Family::Gemv;
  p.stages = stages_;
  p.local_route = tokens <= local_route_tokens_;
  p.fused_combine = tokens <= fused_combine_tokens_;
  // GEMM2 per slot as GEMM1 ends it, where a route kernel and a combine kernel run.
  p.counted = !p.local_route && !p.fused_combine && f.gemv_counted.value_or(tokens <= kCountedMaxTokens);
  if (f.gemv_batch_rows) p.batch_rows = *f.gemv_batch_rows;
  else if (!wide_batch_ok_) p.batch_rows = 8;
  else if (in_.tune && !in_.tune->plan_for(rows).mma) p.batch_rows = in_.tune->plan_for(rows).batch_rows;
  else p.batch_rows = rows >= kWideBatchMinRows ? gemv::kWideBatchRows : 8;
  p.ksplit1 = p.ksplit2 = 1;
  if (p.batch_rows == 8) {
    const MoeConfig& cfg = in_.config;
    const gemv::PackedShape w1 = gemv::packed_shape(2 * int64_t{cfg.intermediate}, cfg.hidden / 32);
    const gemv::PackedShape w2 = gemv::packed_shape(cfg.hidden, cfg.intermediate / 32);
    p.ksplit1 = f.gemv_ksplit.value_or(
        choose_gemv_ksplit(in_.caps, static_cast<int>(w1.tiles), static_cast<int>(w1.chunks), p.max_active));
    p.ksplit2 = f.gemv_ksplit.value_or(
        choose_gemv_ksplit(in_.caps, static_cast<int>(w2.tiles), static_cast<int>(w2.chunks), p.max_active));
  }
  // GEMM2's combine through a cluster of the slots, where the device has clusters and it applies.
  p.cluster_combine = cluster_combine_ && gemv::cluster_combine_valid(p.batch_rows, p.stages, tokens, in_.config.top_k,
                                                                      p.local_route, p.fused_combine);
}

Plan Planner::plan(int64_t tokens) const {
  MXMOE_REQUIRE(tokens >= 0, "tokens: must be >= 0, got ", tokens);
  Plan p;
  p.backend = in_.backend;
  p.tokens = tokens;
  p.max_active = static_cast<int>(std::min<int64_t>(in_.config.num_experts, tokens * in_.config.top_k));
  if (backend_uses_mxfp8(in_.backend)) {
    p.family = Family::Mx;
    p.mx_native = in_.backend == Backend::Mx;
    p.mx_expand_intermediate = in_.force.mx_expand_intermediate.value_or(false);
    return p;
  }
  const double rows = rows_per_expert(tokens);
  if (in_.precision == Precision::Fp8) choose_fp8_tile(tokens, rows, p);
  else if (uses_tensor_cores(rows)) choose_tile(rows, p);
  else choose_gemv(tokens, rows, p);
  return p;
}

}  // namespace mxmoe::plan
