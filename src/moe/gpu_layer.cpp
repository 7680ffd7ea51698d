// GpuLayer: the weights uploaded once in the GEMV layout, and the argument binding every family shares.
#include "moe/gpu_layer.hpp"

#include <vector>

#include "layout/expert_packing.hpp"
#include "layout/fp8_row_exponents.hpp"

namespace mxmoe {
namespace {

PackedMatrix upload(std::span<const uint8_t> blocks, std::span<const uint8_t> scales, std::span<const uint16_t> bias,
                    int experts, int64_t rows, int64_t k, bool swiglu_pairs, bool w4a8) {
  PackedMatrix m;
  m.shape = gemv::packed_shape(rows, k / 32);
  m.wide_scales = gemv::needs_wide_scales(scales.data(), static_cast<int64_t>(scales.size()));
  std::vector<int8_t> exponents;
  if (w4a8) {
    exponents.resize(static_cast<size_t>(experts * rows));
    layout::fp8_row_exponents(scales.data(), experts, rows, k / 32, exponents.data());
    m.row_exponents = DeviceBuffer(exponents.data(), exponents.size());
  }
  const HostBytes packed = pack_gemv_experts(blocks, scales, experts, m.shape, swiglu_pairs, 0, exponents);
  m.packed = DeviceBuffer(packed.data.get(), packed.size);
  if (!bias.empty()) m.bias = DeviceBuffer(bias.data(), bias.size_bytes());
  return m;
}

}  // namespace

GpuLayer::GpuLayer(const MoeConfig& c, const MoeWeights& weights, bool w4a8) : config(c) {
  const int64_t h = c.hidden, i = c.intermediate;
  w1 = upload(weights.w1_blocks, weights.w1_scales, weights.w1_bias, c.num_experts, 2 * i, h, true, w4a8);
  w2 = upload(weights.w2_blocks, weights.w2_scales, weights.w2_bias, c.num_experts, h, i, false, w4a8);
}

void GpuLayer::bind_weights(kernels::GroupedWeights& a, bool gemm1) const {
  const PackedMatrix& m = gemm1 ? w1 : w2;
  a.weights = m.packed.get<uint8_t>();
  a.expert_stride = m.shape.bytes();
  a.bias = m.bias.get<uint16_t>();
  a.n = gemm1 ? 2 * config.intermediate : config.hidden;
  a.k = gemm1 ? config.hidden : config.intermediate;
  a.chunks = static_cast<int>(m.shape.chunks);
  a.tiles = static_cast<int>(m.shape.tiles);
  a.experts = static_cast<int>(m.packed.bytes() / static_cast<size_t>(m.shape.bytes()));
}

void combine_expert_rows(const GpuLayer& layer, const ForwardArgs& f, bool bf16_rows) {
  const MoeConfig& c = layer.config;
  const int32_t* pair_row = f.ws.routing.pair_row;
  const auto* rows16 = reinterpret_cast<const uint16_t*>(f.ws.expert_rows);
  if (bf16_rows && f.out_f32 != nullptr)
    routing::combine_bf16_rows(rows16, pair_row, f.tokens, c.top_k, c.hidden, f.out_f32, f.stream);
  else if (bf16_rows)
    routing::combine_bf16_rows(rows16, pair_row, f.tokens, c.top_k, c.hidden, f.out, f.stream);
  else if (f.out_f32 != nullptr)
    routing::combine_rows(f.ws.expert_rows, pair_row, f.tokens, c.top_k, c.hidden, f.out_f32, f.stream);
  else
    routing::combine_rows(f.ws.expert_rows, pair_row, f.tokens, c.top_k, c.hidden, f.out, f.stream);
}

void GpuLayer::bind_routing(kernels::GroupedRouting& a, const BoundWorkspace& ws) const {
  a.row_pair = ws.routing.row_pair;
  a.top_k = config.top_k;
  a.expert_offsets = ws.routing.expert_offsets;
  a.active_experts = ws.routing.active_experts;
  a.active_count = ws.routing.active_count;
  a.pair_weights = ws.routing.pair_weights;
  a.alpha = config.swiglu_alpha;
  a.limit = config.swiglu_limit;
}

}  // namespace mxmoe
