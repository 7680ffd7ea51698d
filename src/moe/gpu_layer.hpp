#pragma once
// What every GPU launch sequence reads: the layer's shape and its weights on the device (one upload
// in the GEMV layout, read by every kernel family), the forward's buffers, and the sequences
// themselves, one per family (launch_gemv.cpp, launch_mma.cpp, launch_mx.cpp, launch_wgmma_fp8.cpp). A sequence executes
// the plan it is given and decides nothing.
#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "common/device_buffer.hpp"
#include "kernels/common/grouped_args.hpp"
#include "layout/gemv_layout.hpp"
#include "moe/workspace.hpp"
#include "mxmoe/config.hpp"
#include "mxmoe/weights.hpp"
#include "plan/plan.hpp"
#include "routing/routing.hpp"

namespace mxmoe {

// One GEMM's weights in the GEMV layout on the device (a W4A8 layer's records: its own variant of it).
struct PackedMatrix {
  gemv::PackedShape shape;
  DeviceBuffer packed, bias;
  bool wide_scales = false;  // some scale byte is > 128 or 0xFF: the kernels' general multiplier path
  // The W4A8 tiles' exponent of each row, [E][rows] in checkpoint row order (layout/fp8_row_exponents.hpp);
  // uploaded only for Precision::Fp8.
  DeviceBuffer row_exponents;
};

struct GpuLayer {
  MoeConfig config;
  PackedMatrix w1, w2;

  // w4a8: the W4A8 tiles' records (gemv::pack_expert with row exponents) and row exponents
  // (Precision::Fp8 on Hopper); no other family reads such a layer.
  GpuLayer(const MoeConfig& config, const MoeWeights& weights, bool w4a8 = false);
  // One GEMM's weights (gemm1: W1, N = 2I, K = H; else W2, N = H, K = I).
  void bind_weights(kernels::GroupedWeights& a, bool gemm1) const;
  // The forward's routing and the SwiGLU constants.
  void bind_routing(kernels::GroupedRouting& a, const BoundWorkspace& ws) const;
};

// One forward's inputs, output and buffers; `stages` < 4 stops after route, gemm1 or gemm2 (bench --stages).
struct ForwardArgs {
  const uint16_t* hidden;
  routing::RouteSource route;  // the router logits, or the engine's ids and weights
  int64_t tokens;
  uint16_t* out;
  const BoundWorkspace& ws;
  cudaStream_t stream;
  int stages;
  // MoeRunner::forward_f32: the combine writes fp32 sums here in place of `out` (the plan has no fused
  // combine then: gpu_backend.cpp).
  float* out_f32 = nullptr;
};

// The combine every sequence ends with: each token's k rows of GEMM2's output (ws.expert_rows: fp32, or
// bf16 where `bf16_rows`) summed into f.out, or into f.out_f32 where set.
void combine_expert_rows(const GpuLayer& layer, const ForwardArgs& f, bool bf16_rows);

void run_gemv(const GpuLayer& layer, const plan::Plan& plan, const ForwardArgs& f);
void run_mma(const GpuLayer& layer, const plan::Plan& plan, const ForwardArgs& f);  // Mma and Wgmma
void run_mx(const GpuLayer& layer, const plan::Plan& plan, const ForwardArgs& f);
void run_wgmma_fp8(const GpuLayer& layer, const plan::Plan& plan, const ForwardArgs& f);

}  // namespace mxmoe
