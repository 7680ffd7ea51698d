// GPU backends: weight upload (repacked for the kernel family), workspace layout, launch sequence.
// forward() is CUDA-graph safe: launches only, no allocation, no synchronisation, no device reads.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <string>
#include <span>
#include <sstream>
#include <vector>

#include "kernels/gemv/decode.hpp"
#include "kernels/gemv/stream.hpp"
#include "kernels/gemv/gemv.hpp"
#include "kernels/gemv/gemv_layout.hpp"
#include "kernels/gemv/slice_layout.hpp"
#include "kernels/mma/mma_gemm.hpp"
#include "kernels/mma/permute_words.hpp"
#include "kernels/mma/mx_gemm.hpp"
#include "kernels/sm90/chunk_order.hpp"
#include "kernels/sm90/wgmma_gemm.hpp"
#include "routing/expand.hpp"
#include "moe/backend.hpp"
#include "moe/device_buffer.hpp"
#include "moe/expert_packing.hpp"
#include "moe/tune_table.hpp"
#include "moe/workspace.hpp"
#include "mxmoe/error.hpp"
#include "routing/routing.hpp"

namespace mxmoe {
namespace {

// One GEMM's weights in the GEMV layout on the device.
struct PackedMatrix {
  gemv::PackedShape shape;
  DeviceBuffer packed, bias;
  bool wide_scales = false;
  int stages = gemv::kDefaultStages;  // weight ring stages
};

PackedMatrix upload(std::span<const uint8_t> blocks, std::span<const uint8_t> scales, std::span<const uint16_t> bias,
                    int experts, int64_t rows, int64_t k, bool swiglu_pairs) {
  PackedMatrix m;
  m.shape = gemv::packed_shape(rows, k / 32);
  m.wide_scales = gemv::needs_wide_scales(scales.data(), static_cast<int64_t>(scales.size()));
  const HostBytes packed = pack_gemv_experts(blocks, scales, experts, m.shape, swiglu_pairs);
  m.packed = DeviceBuffer(packed.data.get(), packed.size);
  if (!bias.empty()) m.bias = DeviceBuffer(bias.data(), bias.size_bytes());
  return m;
}

// GEMM2's weights in the fused decode path's slice layout (slice_layout.hpp).
DeviceBuffer upload_slices(std::span<const uint8_t> blocks, std::span<const uint8_t> scales, int experts, int64_t rows,
                           int64_t k) {
  const HostBytes packed = pack_slice_experts(blocks, scales, experts, gemv::slice_shape(rows, k / 32));
  return DeviceBuffer(packed.data.get(), packed.size);
}

// An integer tuning knob from the environment: `unset` when unset or empty, else one of `allowed`
// (anything else is an Error naming the variable and the allowed values).
int env_choice(const char* name, std::initializer_list<int> allowed, int unset = 0) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return unset;
  std::string valid;
  for (const int v : allowed) {
    if (std::to_string(v) == env) return v;
    valid += (valid.empty() ? "" : ", ") + std::to_string(v);
  }
  detail::throw_error(name, ": expected one of ", valid, ", got '", env, "'");
}

void require_device_pointer(const void* p, const char* name, size_t alignment) {
  cudaPointerAttributes attr{};
  MXMOE_CUDA_CHECK(cudaPointerGetAttributes(&attr, p));
  MXMOE_REQUIRE(attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged, name,
                ": expected a CUDA device pointer (GPU backend), got a host pointer");
  MXMOE_REQUIRE(reinterpret_cast<uintptr_t>(p) % alignment == 0, name, ": must be ", alignment, "-byte aligned");
}

// The GPU backends: every kernel family reads one upload of the weights (the GEMV layout). `mode`
// Gemv or Mma forces a family; Auto lets the planner pick per forward (uses_mma); MxEmulated and Mx
// run the block-scaled path (MXFP8 activations) with the emulated or the native MX atom.
class GpuBackend final : public BackendImpl {
 public:
  GpuBackend(Backend mode, const MoeConfig& config, const MoeWeights& weights) : config_(config), mode_(mode) {
    int device = 0;
    MXMOE_CUDA_CHECK(cudaGetDevice(&device));
    int smem_optin = 0;
    MXMOE_CUDA_CHECK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    const size_t static_smem = gemv::static_smem_bytes();
    const int k_max = gemv::max_k(static_cast<size_t>(smem_optin), static_smem);
    MXMOE_REQUIRE(config.hidden <= k_max, "hidden: ", config.hidden, " is above the GEMV family's limit of ", k_max,
                  " on this device");
    MXMOE_REQUIRE(config.intermediate <= k_max, "intermediate: ", config.intermediate,
                  " is above the GEMV family's limit of ", k_max, " on this device");
    const int64_t h = config.hidden, i = config.intermediate;
    // Tuning and testing knob: force the ring depth (the default is gemv::kDefaultStages). Checked
    // before the upload, so a refused depth costs no repacking.
    int stages = gemv::kDefaultStages;
    if (const int forced = env_choice("MXMOE_GEMV_STAGES", {2, 3})) {
      MXMOE_REQUIRE(gemv::stages_built(forced), "MXMOE_GEMV_STAGES: ", forced,
                    " stages are not built in this (minimal) profile; it has ", gemv::kDefaultStages);
      for (const int64_t k : {h, i})
        MXMOE_REQUIRE(gemv::stages_fit(static_cast<int>(k), forced, static_cast<size_t>(smem_optin), static_smem),
                      "MXMOE_GEMV_STAGES: ", forced, " stages do not fit this device's shared memory at K = ", k);
      stages = forced;
    }
    // The MX backends' device requirements, before any upload.
    if (mx_mode()) {
      int major = 0, minor = 0;
      MXMOE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
      MXMOE_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
      MXMOE_REQUIRE(mma::mx_supported(mx_atom(), major, minor), "backend: '", to_string(mode), "' needs ",
                    mode == Backend::Mx ? "an SM120/SM121 GPU (compute capability 12.x)"
                                        : "compute capability 8.9 or newer",
                    ", this device is ", major, ".", minor);
      MXMOE_REQUIRE(mma::mx_smem_bytes() <= static_cast<size_t>(smem_optin), "backend: '", to_string(mode),
                    "' needs ", mma::mx_smem_bytes(), " bytes of shared memory per block; this device allows ",
                    smem_optin);
    }
    w1_ = upload(weights.w1_blocks, weights.w1_scales, weights.w1_bias, config.num_experts, 2 * i, h, true);
    w2_ = upload(weights.w2_blocks, weights.w2_scales, weights.w2_bias, config.num_experts, h, i, false);
    w1_.stages = w2_.stages = stages;
    MXMOE_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device));
    // Tuning knob: force the GEMV split-K instead of the cost model's choice (0: not set).
    ksplit_override_ = env_choice("MXMOE_GEMV_KSPLIT", {1, 2, 4, 8});
    // Tuning knob: GEMV GEMM2 counted per slot always (1), never (0), or up to kCountedMaxTokens (unset).
    gemv_counted_knob_ = env_choice("MXMOE_GEMV_COUNTED", {0, 1}, -1);
    // The GEMV family's 16-row batch where its staged rows fit (not on SM120/SM121's 99 KB at K = 2880)
    // and the ring has the default depth; MXMOE_GEMV_BATCH forces 8 or 16.
    wide_ok_ = stages == gemv::kDefaultStages &&
               gemv::wide_batch_fits(config.hidden, static_cast<size_t>(smem_optin), static_smem) &&
               gemv::wide_batch_fits(config.intermediate, static_cast<size_t>(smem_optin), static_smem);
    batch_override_ = env_choice("MXMOE_GEMV_BATCH", {8, gemv::kWideBatchRows});
    MXMOE_REQUIRE(batch_override_ != gemv::kWideBatchRows || wide_ok_, "MXMOE_GEMV_BATCH: ", gemv::kWideBatchRows,
                  "-row batches need the full build profile, ", gemv::kDefaultStages,
                  " ring stages and room for 16 staged rows of K = ", std::max(h, i),
                  " in this device's shared memory (", smem_optin, " bytes per block)");
    // Tuning knob: the largest T whose combine GEMM2 does (0: always the combine kernel).
    fused_combine_tokens_ =
        env_choice("MXMOE_FUSED_COMBINE_TOKENS", {0, 1, 2, 3, 4, 5, 6, 7, 8}, gemv::kDefaultFusedCombineTokens);
    // Tuning knob: GEMM2's combine through a thread-block cluster where it applies (1, the default) or
    // always through L2 and a count (0): kernels/gemv/cluster_combine.cuh.
    int cluster_launch = 0;
    MXMOE_CUDA_CHECK(cudaDeviceGetAttribute(&cluster_launch, cudaDevAttrClusterLaunch, device));
    cluster_combine_ = env_choice("MXMOE_GEMV_CLUSTER_COMBINE", {0, 1}, 1) == 1 && cluster_launch != 0;
    // Tuning knob: the largest T whose GEMMs route the tokens themselves (0: always the route kernel).
    local_route_tokens_ = env_choice("MXMOE_LOCAL_ROUTE_TOKENS", {0, 1, 2, 3, 4}, gemv::kDefaultLocalRouteTokens);
    gemv::configure(static_cast<size_t>(smem_optin));
    // The streamed decode kernel (kernels/gemv/stream.hpp) for T <= kStreamMaxTokens when
    // MXMOE_GEMV_STREAM=1 (kDefaultStream otherwise). Its plan per T is fixed here: the grid must be
    // resident at once, which the occupancy of this shape decides.
    stream_on_ =
        env_choice("MXMOE_GEMV_STREAM", {0, 1}, kDefaultStream ? 1 : 0) == 1 && gemv::stream_stages_built(stages);
    if (stream_on_) {
      gemv::configure_stream(static_cast<size_t>(smem_optin));
      for (int t = 1; t <= gemv::kStreamMaxTokens; ++t) {
        const int slots = static_cast<int>(std::min<int64_t>(config.num_experts, int64_t{t} * config.top_k));
        const int resident = gemv::stream_resident_blocks(static_cast<int>(h), static_cast<int>(i), t, stages, sm_count_);
        stream_plans_[t] = gemv::plan_stream(static_cast<int>(w1_.shape.tiles), static_cast<int>(w2_.shape.tiles), slots,
                                             resident, ksplit_override_);
        stream_on_ = stream_on_ && stream_plans_[t].blocks > 0;
      }
    }
    // The tensor-core family's tiles fit SM120/SM121's 99 KB; a smaller device keeps Auto on GEMV.
    mma_ok_ = mma::fits(static_cast<size_t>(smem_optin));
    MXMOE_REQUIRE(mma_ok_ || mode != Backend::Mma, "backend: 'mma' needs ", mma::smem_bytes(4),
                  " bytes of shared memory per block; this device allows ", smem_optin);
    if (mma_ok_) mma::configure(static_cast<size_t>(smem_optin));
    // The 128-row tile (Hopper only) where it is built and fits.
    {
      int major = 0;
      MXMOE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
      wide_tile_ok_ = mma_ok_ && mma::m_tiles_supported(mma::kWideMTiles) &&
                      mma::wide_fits(major, static_cast<size_t>(smem_optin));
      if (wide_tile_ok_) mma::configure_wide();
    }
    // Hopper's wgmma tiles where this build has their code and the device is a compute capability 9.0.
    wgmma_ok_ = mma_ok_ && sm90::wgmma_runs(device);
    if (wgmma_ok_) sm90::configure_wgmma();
    // Tuning knob: force the tensor-core tile (m16 tiles per block; 8: the 128-row tile), e.g. for bench --tune.
    mtiles_override_ = env_choice("MXMOE_MMA_MTILES", {1, 2, 4, mma::kWideMTiles});
    MXMOE_REQUIRE(mtiles_override_ == 0 || mma::m_tiles_supported(mtiles_override_), "MXMOE_MMA_MTILES: ",
                  mtiles_override_, " is not built in this (minimal) profile");
    // Tuning knob: the swap-AB form of the tensor-core tile (with MXMOE_MMA_MTILES 1, 2, 4 or 8, or the rule's).
    swap_override_ = env_choice("MXMOE_MMA_SWAP_AB", {0, 1}) == 1;
    MXMOE_REQUIRE(!swap_override_ || mma::swap_supported(4), "MXMOE_MMA_SWAP_AB: the swap-AB tiles are not built ",
                  "in this (minimal) profile");
    MXMOE_REQUIRE(!swap_override_ || mtiles_override_ == 0 || mma::swap_supported(mtiles_override_),
                  "MXMOE_MMA_SWAP_AB: the swap-AB tiles have MXMOE_MMA_MTILES 1, 2, 4 or 8, got ", mtiles_override_);
    MXMOE_REQUIRE(mtiles_override_ != mma::kWideMTiles || wide_tile_ok_ || swap_override_,
                  "MXMOE_MMA_MTILES: the 128-row tile needs ",
                  "a Hopper GPU (compute capability 9.x) with ", mma::wide_smem_bytes(),
                  " bytes of shared memory per block (or MXMOE_MMA_SWAP_AB=1)");
    // Tuning knob: the wgmma tiles (1: forced, with MXMOE_MMA_MTILES 2, 4 or 8, else the 128-row tile; 0:
    // never; unset: the planner's choice).
    wgmma_knob_ = env_choice("MXMOE_MMA_WGMMA", {0, 1}, -1);
    MXMOE_REQUIRE(wgmma_knob_ != 1 || wgmma_ok_, "MXMOE_MMA_WGMMA: the wgmma tiles need a compute capability 9.0 GPU ",
                  "and a build with sm_90a in its full profile");
    MXMOE_REQUIRE(wgmma_knob_ != 1 || mtiles_override_ == 0 || sm90::wgmma_rows_supported(mma::block_m(mtiles_override_)),
                  "MXMOE_MMA_WGMMA: the wgmma tiles have MXMOE_MMA_MTILES 2, 4 or 8, got ", mtiles_override_);
    MXMOE_REQUIRE(wgmma_knob_ != 1 || !swap_override_, "MXMOE_MMA_WGMMA: set either it or MXMOE_MMA_SWAP_AB, not both");
    // The measured preference table (bench --tune), when MXMOE_TUNE_FILE names one for this device
    // and shape; a table for another device or shape is ignored, a malformed one is an Error.
    if (const char* path = std::getenv("MXMOE_TUNE_FILE"); path != nullptr && *path != '\0') {
      std::optional<TuneTable> table = load_tune_table(path);
      MXMOE_REQUIRE(table.has_value(), "MXMOE_TUNE_FILE: '", path, "' is not a readable file");
      cudaDeviceProp prop{};
      MXMOE_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
      if (table->matches(prop.name, std::to_string(prop.major) + "." + std::to_string(prop.minor), config))
        tune_ = std::move(table);
    }
    if (mx_mode()) mma::mx_configure();
    // Testing knob: GEMM1's fp32 output quantised by a second expand instead of its MXFP8 epilogue.
    mx_expand_intermediate_ = env_choice("MXMOE_MX_EXPAND_INTERMEDIATE", {0, 1}) == 1;
    device_ = device;
    // The fused decode path (kernels/gemv/decode.hpp) up to MXMOE_DECODE_TOKENS tokens (0: off).
    decode_tokens_ = kDefaultDecodeTokens;
    if (const char* env = std::getenv("MXMOE_DECODE_TOKENS"); env != nullptr && *env != '\0')
      decode_tokens_ = env_choice("MXMOE_DECODE_TOKENS", {0, 1, 2, 3, 4, 5, 6, 7, 8});
    // The deepest ring that fits at the largest T (4 stages on Hopper; SM120's 99 KB take 2).
    auto fits = [&](int depth) {
      return gemv::decode_supported(config.hidden, config.intermediate, decode_tokens_, depth,
                                    static_cast<size_t>(smem_optin));
    };
    while (decode_tokens_ > 0 && !fits(2)) --decode_tokens_;
    decode_stages_ = decode_tokens_ > 0 && fits(4) ? 4 : 2;
    if (decode_tokens_ > 0) {
      w2_slices_ = upload_slices(weights.w2_blocks, weights.w2_scales, config.num_experts, h, i);
      gemv::configure_decode(static_cast<size_t>(smem_optin));
    }
  }

  size_t workspace_bytes(int64_t max_tokens) const override {
    // A workspace for max_tokens serves every smaller T, and the decode path's partial sums (T <=
    // decode_tokens_) can outweigh the GEMV path's rows of a larger T.
    size_t most = layout_for(max_tokens).total;
    const int64_t small = std::min<int64_t>(max_tokens, decode_tokens_);
    if (small > 0) most = std::max(most, layout_for(small).total);
    return most;
  }

  void forward(const uint16_t* hidden, const float* router_logits, int64_t tokens, uint16_t* out, void* workspace,
               cudaStream_t stream, int stages) const override {
    int current = 0;
    MXMOE_CUDA_CHECK(cudaGetDevice(&current));
    MXMOE_REQUIRE(current == device_, "forward: the current CUDA device is ", current,
                  ", but this runner's weights live on device ", device_);
    require_device_pointer(hidden, "hidden", 16);
    require_device_pointer(router_logits, "router_logits", 4);
    require_device_pointer(out, "out", 8);
    require_device_pointer(workspace, "workspace", 256);
    const WorkspaceLayout layout = layout_for(tokens);
    const auto ws = layout.bind(workspace);
    if (mx_mode()) {
      forward_mx(hidden, router_logits, tokens, out, ws, stream, stages);
      return;
    }
    if (tokens <= decode_tokens_ && mode_ != Backend::Mma) {
      forward_decode(hidden, router_logits, tokens, out, ws, stream, stages);
      return;
    }
    if (uses_mma(tokens)) {
      forward_mma(hidden, router_logits, tokens, out, ws, stream, stages);
      return;
    }
    if (uses_stream(tokens)) {
      forward_stream(hidden, router_logits, tokens, out, ws, stream, stages);
      return;
    }
    // Small T (up to the knobs' limits): both GEMMs route the tokens themselves (no route kernel), and
    // GEMM2 does the combine.
    const bool local_route = tokens <= local_route_tokens_;
    const bool fused_combine = tokens <= fused_combine_tokens_;
    // With the route kernel and the combine kernel, GEMM2 starts each expert slot once GEMM1's blocks
    // for it are done (counted on counts the route zeroes), not when GEMM1's whole grid is.
    const bool counted = gemv_counted(tokens);
    routing::RoutingBuffers routing_buffers = ws.routing;
    if (counted) routing_buffers.zero_counts = ws.expert_done;
    if (!local_route) routing::route_and_permute(config_, router_logits, tokens, routing_buffers, stream);
    if (stages < 2) return;

    const int max_active = static_cast<int>(std::min<int64_t>(config_.num_experts, tokens * config_.top_k));
    gemv::GemvArgs a = gemv_args(ws, local_route ? router_logits : nullptr);
    a.pair_row = ws.routing.pair_row;
    a.batch_rows = batch_rows_for(tokens);
    a.stages = w2_.stages;
    // GEMM1 clears the counts of GEMM2's combine, unless GEMM2 combines in clusters without them.
    a.combine_counters = ws.combine_counters;
    a.combine_counter_count = fused_combine && !gemv::cluster_combine_applies(a, tokens, local_route, fused_combine)
                                  ? gemv::combine_counters_needed(config_.hidden)
                                  : 0;
    a.slot_done = counted ? ws.expert_done : nullptr;
    bind_gemm1(a, hidden, ws);
    gemv::launch_gemm1(a, tokens, max_active, stream);
    if (stages < 3) return;

    a.gemm1_blocks_per_slot = gemv::blocks_per_slot(a, tokens, max_active);
    bind_gemm2(a, ws);
    a.combine_out = fused_combine ? out : nullptr;
    a.pair_row_out = ws.routing.pair_row;
    gemv::launch_gemm2(a, tokens, max_active, stream);
    if (stages < 4 || fused_combine) return;

    routing::combine_rows(ws.expert_rows, ws.routing.pair_row, tokens, config_.top_k, config_.hidden, out, stream);
  }

  std::string describe_plan(int64_t tokens) const override {
    if (mx_mode())
      return std::string(mode_ == Backend::Mx ? "mx native (block-scaled mma.sync kind::mxf8f6f4)"
                                               : "mx emulated (e4m3 mma.sync, scales in fp32)") +
             " 64x256x128 tiles, MXFP8 expand (RCEIL) before gemm1, " +
             (mx_expand_intermediate_ ? "fp32 intermediate + MXFP8 expand before gemm2" : "MXFP8 epilogue in gemm1");
    if (uses_mma(tokens)) {
      const mma::MmaTile tile = mma_tile_for(tokens);
      const bool wide = tile.m_tiles == mma::kWideMTiles && !tile.swap_ab;
      if (tile.wgmma)  // weights on M (one 16-row tile per warp) x the rows of an expert on N x K
        return "wgmma bf16 " + std::to_string(sm90::kBlockWeightRows) + "x" + std::to_string(mma::block_m(tile.m_tiles)) +
               "x128 tiles (sm_90a), both gemms" + (tune_ ? " (tune table)" : "");
      if (tile.swap_ab)  // weights on the MMA's M side: M (weight rows) x N (rows of an expert) x K
        return "mma bf16 swap-AB " + std::to_string(tile.m_tiles == 8 ? 128 : mma::kBlockN) + "x" +
               std::to_string(mma::block_m(tile.m_tiles)) + "x128 tiles, both gemms" + (tune_ ? " (tune table)" : "");
      return "mma bf16 " + std::to_string(mma::block_m(tile.m_tiles)) + "x" +
             std::to_string(wide ? mma::kWideBlockN : mma::kBlockN) + "x128 tiles" +
             (wide ? " (weights decoded to shared memory)" : "") + ", both gemms" + (tune_ ? " (tune table)" : "");
    }
    if (uses_stream(tokens)) {
      const gemv::StreamPlan& p = stream_plans_[tokens];
      return "gemv stream, one kernel of " + std::to_string(p.blocks) + " blocks: routed in every block, gemm1 items of " +
             std::to_string(p.tiles_per_item1) + " tiles (ksplit " + std::to_string(8 / p.tiles_per_item1) +
             "), gemm2 items of " + std::to_string(p.tiles_per_item2) + " tiles (ksplit " +
             std::to_string(8 / p.tiles_per_item2) + "), combine in gemm2's last items";
    }
    if (tokens > 0 && tokens <= decode_tokens_)
      return "fused decode (route + gemm1 + swiglu + gemm2 per 32-feature unit, " + std::to_string(grid()) +
             " blocks) + combine";
    const int max_active = static_cast<int>(std::min<int64_t>(config_.num_experts, tokens * config_.top_k));
    gemv::GemvArgs a;
    a.sm_count = sm_count_;
    a.ksplit_override = ksplit_override_;
    std::ostringstream os;
    const int batch = batch_rows_for(tokens);
    os << "gemv 16x" << batch << " tiles";
    if (batch == gemv::kWideBatchRows) {
      os << " (256x16 per block)";
    } else {
      bind(a, w1_, static_cast<int>(2 * config_.intermediate), config_.hidden);
      os << ", gemm1 ksplit " << gemv::ksplit_for(a, max_active);
      bind(a, w2_, config_.hidden, config_.intermediate);
      os << ", gemm2 ksplit " << gemv::ksplit_for(a, max_active);
    }
    os << ", " << max_active << " expert slots";
    if (w1_.stages != gemv::kDefaultStages || w2_.stages != gemv::kDefaultStages)
      os << ", ring stages " << w1_.stages << "/" << w2_.stages;
    if (tokens <= local_route_tokens_) os << ", routed in both gemms";
    if (tokens <= fused_combine_tokens_) os << ", combine in gemm2";
    a.batch_rows = batch;
    a.stages = w2_.stages;
    a.top_k = config_.top_k;
    a.cluster_combine = cluster_combine_;
    if (gemv::cluster_combine_applies(a, tokens, tokens <= local_route_tokens_, tokens <= fused_combine_tokens_))
      os << " (a cluster of the slots)";
    if (gemv_counted(tokens)) os << ", gemm2 per slot as gemm1 ends it";
    return os.str();
  }

 private:
  // The fused decode path is off by default: measured on an H200 it is still slower than the GEMV
  // path at every T (docs/perf-log.md); MXMOE_DECODE_TOKENS turns it on up to that T.
  static constexpr int kDefaultDecodeTokens = 0;
  // The streamed decode kernel is off by default: on an H200 it ties the per-GEMM kernels at T = 1
  // (25.6 vs 25.7 us, gpt-oss-120b) and loses at T = 2 (38.8 vs 38.1): docs/perf-log.md.
  static constexpr bool kDefaultStream = false;

  int grid() const { return gemv::decode_grid(sm_count_); }

  // GEMV GEMM2 started per expert slot as GEMM1 finishes it (gemv::GemvArgs::slot_done): where a route
  // kernel and a combine kernel run, up to kCountedMaxTokens unless MXMOE_GEMV_COUNTED says otherwise.
  // Measured on an H200 (one call, two rounds, docs/perf-log.md), us per layer, grid wait against
  // counted: gpt-oss-120b T = 3 61.0 / 55.4, T = 4 67.5 / 66.5, T = 8 124.1 / 120.5, but T = 16 214 /
  // 217 and T = 32 343 / 348 (GEMM1 in 7 and 14 waves: its tail weighs less than the waiting blocks);
  // gpt-oss-20b T = 3 58.4 / 52.9, T = 4 63.6 / 61.1, T = 8 93.7 / 92.8.
  static constexpr int64_t kCountedMaxTokens = 8;
  bool gemv_counted(int64_t tokens) const {
    if (tokens <= local_route_tokens_ || tokens <= fused_combine_tokens_) return false;
    return gemv_counted_knob_ == -1 ? tokens <= kCountedMaxTokens : gemv_counted_knob_ == 1;
  }

  // Average rows per expert slot: T*k rows over min(E, T*k) slots.
  double rows_per_expert(int64_t tokens) const {
    const int64_t pairs = tokens * config_.top_k;
    return pairs == 0 ? 0.0 : static_cast<double>(pairs) / static_cast<double>(std::min<int64_t>(config_.num_experts, pairs));
  }

  // The GEMV batch: forced (MXMOE_GEMV_BATCH), else the tune table's, else 16 rows from
  // kWideBatchMinRows rows per expert on (below, most experts fit one 8-row pass and the wide batch
  // would only add MMAs and staging: 120b T = 128, 4 rows: 554 vs 625 us; T = 192, 6 rows: 656 vs
  // 647), where it fits.
  static constexpr double kWideBatchMinRows = 6.0;
  int batch_rows_for(int64_t tokens) const {
    if (batch_override_ > 0) return batch_override_;
    if (!wide_ok_) return 8;
    if (tune_) {
      const TunePlan& p = tune_->plan_for(rows_per_expert(tokens));
      if (!p.mma) return p.batch_rows;
    }
    return rows_per_expert(tokens) >= kWideBatchMinRows ? gemv::kWideBatchRows : 8;
  }

  // The tensor-core family when forced, or (Auto) from kMmaMinRows rows per expert on: below, the GEMV
  // family (one block routes and streams a few rows cheaply); from 2 rows the 16-row swap-AB tile, whose
  // warps run one n8 group of rows when an expert has at most 8. Measured on an H200 (one call,
  // docs/perf-log.md), us per layer, GEMV against that tile: gpt-oss-120b 1 row per expert (T = 32) 334
  // / 335, 2 rows (T = 64) 450 / 439, 3 rows 499 / 479; gpt-oss-20b 1 row (T = 8) 93 / 121, 2 rows
  // (T = 16) 136 / 139, 3 rows 144 / 142 (a tune table places 20b's boundary where it measures it).
  static constexpr double kMmaMinRows = 2.0;
  bool uses_mma(int64_t tokens) const {
    if (mode_ == Backend::Mma) return true;
    if (mode_ != Backend::Auto || !mma_ok_) return false;
    return tune_ ? tune_->plan_for(rows_per_expert(tokens)).mma : rows_per_expert(tokens) >= kMmaMinRows;
  }

  // Hopper's wgmma tiles (Auto, no tune table): 32 rows from kWgmmaNarrowRows rows per expert, 64 from
  // kWgmmaMinRows, 128 from kWgmmaWideRows; below, the mma.sync tiles. bench --tune on an H200
  // (gpt-oss-120b, us per layer, bench/results/2026-11-22_h200_wgmma_tune_tables.txt): 32 rows per
  // expert (T = 1024): 64-row swap 1185, 64-row wgmma 1109, 128-row 1394; 64 rows (T = 2048): 64-row
  // wgmma 1685, 128-row 1617. The 32-row tile (docs/perf-log.md): 16 rows per expert, gpt-oss-20b
  // T = 128: 205 against the 32-row swap tile's 232; against the 16-row swap tile (one call): 120b 14
  // rows (T = 448) 716 / 719, 16 rows 723 / 823; 20b 14 rows (T = 112) 199 / 206. The 64-row tile
  // against the 128-row one since its N = 48 path (docs/perf-log.md): 120b 48 / 56 / 64 rows 1029 /
  // 1163 / 1452 against 1113 / 1250 / 1307; 20b 48 / 56 rows 269 / 310 against 285 / 301 (that model's
  // boundary is near 52; a tune table has it).
  static constexpr double kWgmmaNarrowRows = 14.0;
  static constexpr double kWgmmaMinRows = 24.0;
  static constexpr double kWgmmaWideRows = 60.0;

  // The tensor-core tile: forced (MXMOE_MMA_WGMMA, MXMOE_MMA_MTILES, MXMOE_MMA_SWAP_AB), else the tune
  // table's (when built and runnable here), else Hopper's wgmma rule above, else mma::tile_for's.
  mma::MmaTile mma_tile_for(int64_t tokens) const {
    const double rows = rows_per_expert(tokens);
    if (wgmma_knob_ == 1) return {mtiles_override_ > 0 ? mtiles_override_ : 8, false, true};
    if (mtiles_override_ > 0 || swap_override_) {
      mma::MmaTile tile = mma::tile_for(rows);
      if (mtiles_override_ > 0) tile.m_tiles = mtiles_override_;
      tile.swap_ab = swap_override_;  // every tile count has a swap form (the constructor checked the build)
      return tile;
    }
    if (tune_) {
      const TunePlan& p = tune_->plan_for(rows);
      const mma::MmaTile tile{p.m_tiles, p.swap_ab, p.wgmma};
      const bool wide = p.m_tiles == mma::kWideMTiles && !p.swap_ab && !p.wgmma;
      if (p.mma && p.wgmma && wgmma_ok_ && wgmma_knob_ != 0) return tile;
      if (p.mma && !p.wgmma && mma::tile_supported(tile) && (!wide || wide_tile_ok_)) return tile;
    }
    if (wgmma_ok_ && wgmma_knob_ != 0 && rows >= kWgmmaNarrowRows)
      return {rows < kWgmmaMinRows ? 2 : rows < kWgmmaWideRows ? 4 : 8, false, true};
    return mma::tile_for(rows);
  }

  void forward_mma(const uint16_t* hidden, const float* router_logits, int64_t tokens, uint16_t* out,
                   const BoundWorkspace& ws, cudaStream_t stream, int stages) const {
    const mma::MmaTile tile = mma_tile_for(tokens);
    // The swap-AB tiles' GEMM2 starts each expert as GEMM1 finishes it, on counts the route zeroes.
    routing::RoutingBuffers routing_buffers = ws.routing;
    if (tile.swap_ab) routing_buffers.zero_counts = ws.expert_done;
    routing::route_and_permute(config_, router_logits, tokens, routing_buffers, stream);
    if (stages < 2) return;
    const int max_active = static_cast<int>(std::min<int64_t>(config_.num_experts, tokens * config_.top_k));
    mma::MmaArgs a;
    a.swap_ab = tile.swap_ab;
    bind_routing(a, ws);
    bind_mma(a, w1_, static_cast<int>(2 * config_.intermediate), config_.hidden);
    a.act = hidden;
    if (tile.wgmma) {
      // The wgmma tiles read their activations by tensor copies of whole m-tiles: in chunk order, rows
      // padded to whole chunks, GEMM1's tokens expanded to their sorted rows (in GEMM2's output
      // buffer, which GEMM2 only writes after GEMM1 has finished: the workspace layout sizes it so).
      auto* expanded = reinterpret_cast<uint16_t*>(ws.expert_rows);
      sm90::to_chunk_order(hidden, expanded, tokens * config_.top_k, config_.hidden, stream, ws.routing.row_pair,
                           config_.top_k);
      a.act = expanded;
      a.half_tail = sm90::half_tail(config_.hidden);
      a.k = static_cast<int>(sm90::padded_k(config_.hidden));
    } else if (tile.swap_ab) {  // the swap-AB tiles read their activations in the decode's pair order
      mma::permute_words(hidden, ws.permuted_hidden, tokens * config_.hidden, stream);
      a.act = ws.permuted_hidden;
      a.expert_done = ws.expert_done;
    }
    a.out = ws.intermediate;
    if (tile.wgmma)
      sm90::launch_wgmma<true>(a, tokens, max_active, mma::block_m(tile.m_tiles), stream);
    else
      mma::launch_gemm1(a, tokens, max_active, tile.m_tiles, stream);
    if (stages < 3) return;
    bind_mma(a, w2_, config_.hidden, config_.intermediate);
    a.act = static_cast<const uint16_t*>(ws.intermediate);  // GEMM1 wrote it in the order GEMM2 reads
    a.out = ws.expert_rows;
    if (tile.wgmma) {
      a.half_tail = sm90::half_tail(config_.intermediate);
      a.k = static_cast<int>(sm90::padded_k(config_.intermediate));
      sm90::launch_wgmma<false>(a, tokens, max_active, mma::block_m(tile.m_tiles), stream);
    } else {
      mma::launch_gemm2(a, tokens, max_active, tile.m_tiles, stream);
    }
    if (stages < 4) return;
    // The swap-AB and wgmma tiles' GEMM2 writes bf16 rows (swap_epilogue.cuh), the others fp32.
    if (tile.wgmma || tile.swap_ab)
      routing::combine_bf16_rows(reinterpret_cast<const uint16_t*>(ws.expert_rows), ws.routing.pair_row, tokens,
                                 config_.top_k, config_.hidden, out, stream);
    else
      routing::combine_rows(ws.expert_rows, ws.routing.pair_row, tokens, config_.top_k, config_.hidden, out, stream);
  }

  static void bind_mma(mma::MmaArgs& a, const PackedMatrix& m, int n, int k) {
    bind_weights(a, m, n, k);
    a.wide_scales = m.wide_scales;
  }

  WorkspaceLayout layout_for(int64_t tokens) const {
    const size_t floats = tokens > 0 && tokens <= decode_tokens_ && !mx_mode()
                              ? gemv::decode_partial_floats(config_.num_experts, config_.top_k, config_.hidden,
                                                            config_.intermediate, tokens, grid())
                              : 0;
    MxBufferBytes mx;
    if (mx_mode()) {
      const int64_t pairs = tokens * config_.top_k;
      const int64_t slots = std::min<int64_t>(config_.num_experts, pairs);
      // The second expand (MXMOE_MX_EXPAND_INTERMEDIATE) reuses GEMM1's input buffer for K = I.
      const int k = mx_expand_intermediate_ ? std::max(config_.hidden, config_.intermediate) : config_.hidden;
      mx.codes = static_cast<size_t>(routing::expand_code_bytes(pairs, slots, k));
      mx.scales = static_cast<size_t>(routing::expand_scale_bytes(pairs, slots, k));
      if (!mx_expand_intermediate_) {
        mx.codes2 = static_cast<size_t>(routing::expand_code_bytes(pairs, slots, config_.intermediate));
        mx.scales2 = static_cast<size_t>(routing::expand_scale_bytes(pairs, slots, config_.intermediate));
      }
    }
    // The fp32 intermediate only exists for the second expand; the MXFP8 epilogue skips it.
    const size_t intermediate_bytes = !mx_mode() ? 2 : mx_expand_intermediate_ ? 4 : 0;
    // The tensor-core family's swap-AB tiles read a permuted copy of the hidden states, the wgmma tiles
    // the tokens expanded to their rows and an intermediate with rows padded to whole chunks.
    const bool permute_hidden =
        (mode_ == Backend::Auto || mode_ == Backend::Mma) && mma_ok_ && (mma::swap_supported(4) || wgmma_ok_);
    return WorkspaceLayout(config_, tokens, floats, mx, intermediate_bytes, permute_hidden);
  }

  bool mx_mode() const { return mode_ == Backend::MxEmulated || mode_ == Backend::Mx; }
  mma::MxAtom mx_atom() const { return mode_ == Backend::Mx ? mma::MxAtom::Native : mma::MxAtom::Emulated; }

  // The block-scaled path: route, expand (bf16 -> MXFP8, swizzled scales) of the tokens, GEMM1 with
  // the MXFP8 epilogue (it writes GEMM2's input), GEMM2, combine. MXMOE_MX_EXPAND_INTERMEDIATE=1
  // instead writes GEMM1's fp32 output and quantises it in a second expand (the same bytes, one more
  // pass). bench --stages: gemm1 includes the first expand, gemm2 the second.
  void forward_mx(const uint16_t* hidden, const float* router_logits, int64_t tokens, uint16_t* out,
                  const BoundWorkspace& ws, cudaStream_t stream, int stages) const {
    routing::route_and_permute(config_, router_logits, tokens, ws.routing, stream);
    if (stages < 2) return;
    const int max_active = static_cast<int>(std::min<int64_t>(config_.num_experts, tokens * config_.top_k));
    routing::ExpandArgs e;
    e.top_k = config_.top_k;
    e.experts = config_.num_experts;
    e.rule = ScaleRule::Rceil;
    e.codes = ws.mx_codes;
    e.scales = ws.mx_scales;
    e.act = hidden;
    e.gather = true;
    e.k = config_.hidden;
    routing::expand_mxfp8(e, ws.routing, tokens, max_active, stream);
    mma::MxArgs a;
    a.codes = ws.mx_codes;
    a.scales = ws.mx_scales;
    bind_routing(a, ws);
    bind_weights(a, w1_, static_cast<int>(2 * config_.intermediate), config_.hidden);
    a.out = ws.intermediate;
    if (!mx_expand_intermediate_) {
      a.out_codes = ws.mx_codes2;
      a.out_scales = ws.mx_scales2;
      a.floor_rule = e.rule == ScaleRule::Floor;
    }
    mma::launch_mx_gemm1(mx_atom(), a, tokens, max_active, stream);
    if (stages < 3) return;
    if (mx_expand_intermediate_) {
      e.act = ws.intermediate;
      e.f32 = true;
      e.gather = false;
      e.k = config_.intermediate;
      routing::expand_mxfp8(e, ws.routing, tokens, max_active, stream);
    } else {
      a.codes = ws.mx_codes2;
      a.scales = ws.mx_scales2;
    }
    a.out_codes = a.out_scales = nullptr;
    bind_weights(a, w2_, config_.hidden, config_.intermediate);
    a.out = ws.expert_rows;
    mma::launch_mx_gemm2(mx_atom(), a, tokens, max_active, stream);
    if (stages < 4) return;
    routing::combine_rows(ws.expert_rows, ws.routing.pair_row, tokens, config_.top_k, config_.hidden, out, stream);
  }


  // stages (bench --stages): 1..3 = the fused kernel, 4 = and the combine.
  void forward_decode(const uint16_t* hidden, const float* router_logits, int64_t tokens, uint16_t* out,
                      const BoundWorkspace& ws, cudaStream_t stream, int stages) const {
    gemv::DecodeArgs a;
    a.hidden = hidden;
    a.logits = router_logits;
    a.tokens = static_cast<int>(tokens);
    a.experts = config_.num_experts;
    a.top_k = config_.top_k;
    a.softmax_first = config_.routing == RoutingOrder::SoftmaxThenTopk;
    a.renormalize = config_.renormalize;
    a.hidden_size = config_.hidden;
    a.inter_size = config_.intermediate;
    a.w1 = w1_.packed.get<uint8_t>();
    a.w1_stride = w1_.shape.bytes();
    a.chunks1 = static_cast<int>(w1_.shape.chunks);
    a.b1 = w1_.bias.get<uint16_t>();
    a.w2 = w2_slices_.get<uint8_t>();
    a.w2_stride = gemv::slice_shape(config_.hidden, config_.intermediate / 32).bytes();
    a.b2 = w2_.bias.get<uint16_t>();
    a.alpha = config_.swiglu_alpha;
    a.limit = config_.swiglu_limit;
    a.wide_scales = w1_.wide_scales || w2_.wide_scales;
    a.stages = decode_stages_;
    a.grid = grid();
    a.max_segments = gemv::decode_max_segments(config_.num_experts, config_.top_k, config_.intermediate, tokens, a.grid);
    a.partials = ws.decode_partials;
    a.pair_slot = ws.pair_slot;
    a.pair_row = ws.routing.pair_row;
    a.pair_weight = ws.routing.pair_weights;
    a.slot_expert = ws.slot_expert;
    a.active_count = ws.routing.active_count;
    a.out = out;
    gemv::launch_decode(a, stages < MoeRunner::kAllStages ? 1 : 2, stream);
  }

  bool uses_stream(int64_t tokens) const {
    return stream_on_ && tokens > 0 && tokens <= gemv::kStreamMaxTokens && !uses_mma(tokens) && !mx_mode() &&
           tokens > decode_tokens_;
  }

  // T <= kStreamMaxTokens: the whole layer in one kernel (kernels/gemv/stream.hpp). Profiling stages:
  // 2 runs GEMM1's items alone, 3 adds GEMM2's, 4 the combine (route is in every block, no stage of its own).
  void forward_stream(const uint16_t* hidden, const float* router_logits, int64_t tokens, uint16_t* out,
                      const BoundWorkspace& ws, cudaStream_t stream, int stages) const {
    if (stages < 2) return;
    gemv::StreamArgs s;
    s.g1 = s.g2 = gemv_args(ws, router_logits);
    bind_gemm1(s.g1, hidden, ws);
    bind_gemm2(s.g2, ws);
    s.g2.combine_out = out;
    s.counters = ws.stream_counters;
    s.phases = std::min(stages, MoeRunner::kAllStages) - 1;
    gemv::launch_stream(s, static_cast<int>(tokens), stream_plans_[tokens], stream);
  }

  // The GEMV arguments both GEMMs share: the routing, and the logits when the kernels route the
  // tokens themselves (null otherwise).
  gemv::GemvArgs gemv_args(const BoundWorkspace& ws, const float* logits) const {
    gemv::GemvArgs a;
    bind_routing(a, ws);
    a.sm_count = sm_count_;
    a.ksplit_override = ksplit_override_;
    a.cluster_combine = cluster_combine_;
    a.logits = logits;
    a.experts = config_.num_experts;
    a.softmax_first = config_.routing == RoutingOrder::SoftmaxThenTopk;
    a.renormalize = config_.renormalize;
    return a;
  }
  // GEMM1 reads the tokens and writes the bf16 intermediate; GEMM2 reads it and writes fp32 rows.
  void bind_gemm1(gemv::GemvArgs& a, const uint16_t* hidden, const BoundWorkspace& ws) const {
    bind(a, w1_, static_cast<int>(2 * config_.intermediate), config_.hidden);
    a.act = hidden;
    a.out = ws.intermediate;
  }
  void bind_gemm2(gemv::GemvArgs& a, const BoundWorkspace& ws) const {
    bind(a, w2_, config_.hidden, config_.intermediate);
    a.act = static_cast<const uint16_t*>(ws.intermediate);
    a.out = ws.expert_rows;
  }

  static void bind(gemv::GemvArgs& a, const PackedMatrix& m, int n, int k) {
    bind_weights(a, m, n, k);
    a.wide_scales = m.wide_scales;
    a.stages = m.stages;
  }

  // One GEMM's weights (every family reads the same upload) and the forward's routing.
  static void bind_weights(kernels::GroupedWeights& a, const PackedMatrix& m, int n, int k) {
    a.weights = m.packed.get<uint8_t>();
    a.expert_stride = m.shape.bytes();
    a.bias = m.bias.get<uint16_t>();
    a.n = n;
    a.k = k;
    a.chunks = static_cast<int>(m.shape.chunks);
    a.tiles = static_cast<int>(m.shape.tiles);
    a.experts = static_cast<int>(m.packed.bytes() / static_cast<size_t>(m.shape.bytes()));
  }
  void bind_routing(kernels::GroupedRouting& a, const BoundWorkspace& ws) const {
    a.row_pair = ws.routing.row_pair;
    a.top_k = config_.top_k;
    a.expert_offsets = ws.routing.expert_offsets;
    a.active_experts = ws.routing.active_experts;
    a.active_count = ws.routing.active_count;
    a.pair_weights = ws.routing.pair_weights;
    a.alpha = config_.swiglu_alpha;
    a.limit = config_.swiglu_limit;
  }

  MoeConfig config_;
  Backend mode_;
  bool mma_ok_ = false;
  PackedMatrix w1_, w2_;
  DeviceBuffer w2_slices_;  // GEMM2 again, in the decode path's layout (only when that path is on)
  int decode_tokens_ = 0;
  int decode_stages_ = 2;
  int sm_count_ = 0;
  int device_ = 0;
  int ksplit_override_ = 0;
  bool cluster_combine_ = true;
  int gemv_counted_knob_ = -1;
  bool wide_ok_ = false;    // the GEMV family's 16-row batch is built and fits this device and shape
  int batch_override_ = 0;  // MXMOE_GEMV_BATCH (0: not set)
  bool mx_expand_intermediate_ = false;  // MXMOE_MX_EXPAND_INTERMEDIATE: a second expand, not GEMM1's epilogue
  int fused_combine_tokens_ = gemv::kDefaultFusedCombineTokens;
  int local_route_tokens_ = gemv::kDefaultLocalRouteTokens;
  bool stream_on_ = false;  // the streamed decode kernel serves T <= kStreamMaxTokens
  std::array<gemv::StreamPlan, gemv::kStreamMaxTokens + 1> stream_plans_{};
  int mtiles_override_ = 0;
  bool swap_override_ = false;
  bool wide_tile_ok_ = false;  // the 128-row tensor-core tile is built and fits this device
  bool wgmma_ok_ = false;      // Hopper's wgmma tiles are built and run on this device
  int wgmma_knob_ = -1;        // MXMOE_MMA_WGMMA: 1 forced, 0 never, -1 unset
  std::optional<TuneTable> tune_;
};

}  // namespace

std::unique_ptr<BackendImpl> make_gpu_backend(Backend backend, const MoeConfig& config, const MoeWeights& weights) {
  switch (backend) {
    case Backend::Auto:
    case Backend::Gemv:
    case Backend::Mma:
    case Backend::MxEmulated:
    case Backend::Mx:
      return std::make_unique<GpuBackend>(backend, config, weights);
    default:
      detail::throw_error("backend: '", to_string(backend), "' is not a GPU backend of this build");
  }
}

}  // namespace mxmoe
