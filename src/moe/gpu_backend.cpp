// The GPU backends: the planner for this device (plan/planner.hpp), the weights on the device
// (gpu_layer.hpp), the workspace layout, and per forward the plan's launch sequence. forward() is
// CUDA-graph safe: launches only, no allocation, no synchronisation, no device reads.
#include <cuda_runtime.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "common/cuda_check.hpp"
#include "kernels/common/code_arch.hpp"
#include "kernels/gemv/gemv.hpp"
#include "kernels/mma/mma_gemm.hpp"
#include "kernels/mma/mx_gemm.hpp"
#include "kernels/sm90/wgmma_fp8_gemm.hpp"
#include "kernels/sm90/wgmma_gemm.hpp"
#include "moe/backend.hpp"
#include "moe/gpu_layer.hpp"
#include "plan/tune_table.hpp"
#include "moe/workspace.hpp"
#include "mxmoe/error.hpp"
#include "plan/planner.hpp"

namespace mxmoe {
namespace {

void require_device_pointer(const void* p, const char* name, size_t alignment) {
  cudaPointerAttributes attr{};
  MXMOE_CUDA_CHECK(cudaPointerGetAttributes(&attr, p));
  MXMOE_REQUIRE(attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged, name,
                ": expected a CUDA device pointer (GPU backend), got a host pointer");
  MXMOE_REQUIRE(reinterpret_cast<uintptr_t>(p) % alignment == 0, name, ": must be ", alignment, "-byte aligned");
}

// The planner's input for the current device: its caps, what this build's tiles need of it, and the
// options' override and tune table. Everything is checked here, before any weight is uploaded.
plan::PlannerInput planner_input(int device, Backend backend, const MoeConfig& config, const RunnerOptions& options) {
  plan::PlannerInput in;
  in.caps = plan::probe_caps(device);
  in.fits = plan::fits_on_device(device, in.caps);
  if (!options.target.empty()) {
    // A target's plan, run here: what its tiles need of the target (the planner's view), and this
    // device must run them too.
    const plan::Fits here = in.fits;
    in.caps = plan::target_caps(options.target);
    in.fits = plan::fits_for_caps(in.caps);
    in.fits.mma = in.fits.mma && here.mma;
    in.fits.wgmma = in.fits.wgmma && here.wgmma;
    in.fits.mx = in.fits.mx && here.mx;
    in.fits.wgmma_fp8 = in.fits.wgmma_fp8 && here.wgmma_fp8;
  }
  in.config = config;
  in.backend = backend;
  in.force = options.plan;
  in.routed_experts = options.routed_experts;
  in.precision = options.precision;
  if (!options.tune_file.empty()) {
    std::optional<TuneTable> table = load_tune_table(options.tune_file);
    MXMOE_REQUIRE(table.has_value(), "tune_file (MXMOE_TUNE_FILE): '", options.tune_file, "' is not a readable file");
    in.tune = std::move(table);
  }
  return in;
}

int current_device() {
  int device = 0;
  MXMOE_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

class GpuBackend final : public BackendImpl {
 public:
  GpuBackend(Backend mode, const MoeConfig& config, const MoeWeights& weights, const RunnerOptions& options,
             std::optional<mma::MxAtom> mx_atom)
      : device_(current_device()),
        planner_(planner_input(device_, mode, config, options)),
        layer_(config, weights, w4a8()),
        log_plan_(options.log_plan),
        mx_atom_(mx_atom) {
    const plan::PlannerInput& in = planner_.input();
    int smem = 0;  // the device's: a target's plan asks for no more than the target has
    MXMOE_CUDA_CHECK(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device_));
    const int code = kernels::code_arch(device_);  // the code it runs (code_arch.hpp)
    cc_major_ = code / 10;
    // A target's MX plan runs the emulated atom here unless this is an SM12x GPU (plan_for): that atom is
    // an FP8 mma.sync, missing from code below sm_89, where its kernels are a trap.
    MXMOE_REQUIRE(!mx_mode() || cc_major_ == 12 || code >= 89, "backend: '", to_string(planner_.input().backend),
                  "' for target '", options.target, "' runs the emulated MX atom on this GPU, which needs sm_89 or ",
                  "newer code (FP8 mma.sync); this GPU runs sm_", code, " code");
    gemv::configure(static_cast<size_t>(smem));
    if (in.fits.mma) mma::configure(static_cast<size_t>(smem));
    if (in.fits.mma && in.fits.wgmma) sm90::configure_wgmma();
    if (mx_mode()) mma::mx_configure();
    if (w4a8()) sm90::configure_wgmma_fp8();
  }

  size_t workspace_bytes(int64_t max_tokens) const override {
    // A workspace for max_tokens serves every smaller T: every buffer grows with T.
    return layout_for(max_tokens).total;
  }

  using BackendImpl::forward;
  void forward(const uint16_t* hidden, const routing::RouteSource& route, int64_t tokens, uint16_t* out,
               void* workspace, cudaStream_t stream, int stages) const override {
    run(hidden, route, tokens, out, nullptr, workspace, stream, stages);
  }

  void forward_f32(const uint16_t* hidden, const routing::RouteSource& route, int64_t tokens, float* out,
                   void* workspace, cudaStream_t stream) const override {
    run(hidden, route, tokens, nullptr, out, workspace, stream, MoeRunner::kAllStages);
  }

  std::string describe_plan(int64_t tokens) const override { return plan_for(tokens).to_string(); }

 private:
  // One forward into `out` (bf16) or `out_f32`.
  void run(const uint16_t* hidden, const routing::RouteSource& route, int64_t tokens, uint16_t* out, float* out_f32,
           void* workspace, cudaStream_t stream, int stages) const {
    const int current = current_device();
    MXMOE_REQUIRE(current == device_, "forward: the current CUDA device is ", current,
                  ", but this runner's weights live on device ", device_);
    require_device_pointer(hidden, "hidden", 16);
    if (route.routed()) {  // ids and weights stay on the device: checked there (common/routed_pairs.cuh)
      require_device_pointer(route.topk_ids, "topk_ids", route.ids64 ? 8 : 4);
      require_device_pointer(route.topk_weights, "topk_weights", 4);
    } else {
      require_device_pointer(route.logits, "router_logits", 4);
    }
    if (out_f32 != nullptr)
      require_device_pointer(out_f32, "out", 16);
    else
      require_device_pointer(out, "out", 8);
    require_device_pointer(workspace, "workspace", 256);
    plan::Plan p = plan_for(tokens);
    // The fp32 output comes from the combine kernel: GEMM2 writes its rows and does not combine itself.
    if (out_f32 != nullptr) p.fused_combine = p.cluster_combine = false;
    if (log_plan_) std::cerr << "mxmoe plan: T = " << tokens << ": " << p.to_string() << "\n";
    const WorkspaceLayout layout = layout_for(tokens);
    const BoundWorkspace ws = layout.bind(workspace);
    const ForwardArgs f{hidden, route, tokens, out, ws, stream, stages, out_f32};
    switch (p.family) {
      case plan::Family::Gemv: return run_gemv(layer_, p, f);
      case plan::Family::Mma:
      case plan::Family::Wgmma: return run_mma(layer_, p, f);
      case plan::Family::Mx: return run_mx(layer_, p, f);
      case plan::Family::WgmmaFp8: return run_wgmma_fp8(layer_, p, f);
    }
  }

  // The planner's plan, as this device runs it: an SM120/SM121 target's native MX plan runs the
  // emulated atom on another GPU (the same data path: mx_atoms.cuh).
  plan::Plan plan_for(int64_t tokens) const {
    plan::Plan p = planner_.plan(tokens);
    if (p.family == plan::Family::Mx && p.mx_native && cc_major_ != 12) p.mx_native = false;
    if (p.family == plan::Family::Mx && mx_atom_) {
      p.mx_native = *mx_atom_ == mma::MxAtom::Native;
      p.mx_planted_fault = *mx_atom_ == mma::MxAtom::PlantedFault;
    }
    return p;
  }

  bool mx_mode() const { return backend_uses_mxfp8(planner_.input().backend); }
  bool w4a8() const { return runs_w4a8(planner_.input()); }

  WorkspaceLayout layout_for(int64_t tokens) const { return workspace_layout(planner_.input(), tokens); }

  int device_;
  int cc_major_ = 0;
  plan::Planner planner_;
  GpuLayer layer_;
  bool log_plan_;
  std::optional<mma::MxAtom> mx_atom_;  // the self-test's atom, in place of the planner's
};

}  // namespace

std::unique_ptr<BackendImpl> make_gpu_backend(Backend backend, const MoeConfig& config, const MoeWeights& weights,
                                              const RunnerOptions& options, std::optional<mma::MxAtom> mx_atom) {
  MXMOE_REQUIRE(backend_on_gpu(backend) && backend != Backend::Reference, "backend: '", to_string(backend),
                "' is not a GPU backend of this build");
  return std::make_unique<GpuBackend>(backend, config, weights, options, mx_atom);
}

}  // namespace mxmoe
