#pragma once
// ShardedLayer: one rank's shard of a MoE layer (mxmoe/shard.hpp) for Python, over ShardedMoe without a
// communicator: every forward writes the rank's partial output, and the Python side sums the ranks'
// partials (torch.distributed, python/mxmoe/_shard.py). No NCCL handle crosses the boundary.
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/device_buffer.hpp"
#include "mxmoe/mxmoe.hpp"
#include "tensor_args.hpp"

namespace mxmoe::python {

// resolve_shard with its errors under the name of the argument that carried the spec.
inline LayerShard resolve_named(const MoeConfig& config, const ShardSpec& spec, const char* name) {
  try {
    return resolve_shard(config, spec);
  } catch (const Error& e) {
    detail::throw_error(name, ": ", e.what());
  }
}

// What a layer's tensors w1_blocks [E, 2I, H/32, 16] and w2_blocks [E, H, I/32, 16] are for `config`.
inline bool fits_layer(const MoeConfig& c, const InArray& w1_blocks, const InArray& w2_blocks) {
  const int64_t e = c.num_experts, h = c.hidden, i = c.intermediate;
  return has_shape(w1_blocks, {e, 2 * i, h / 32, 16}) && has_shape(w2_blocks, {e, h, i / 32, 16});
}
inline std::string layer_shapes(const MoeConfig& c) {
  const int64_t e = c.num_experts, h = c.hidden, i = c.intermediate;
  return "w1_blocks " + shape_text({e, 2 * i, h / 32, 16}) + ", w2_blocks " + shape_text({e, h, i / 32, 16});
}

class ShardedLayer {
 public:
  // weights: the whole layer (sliced here with slice_layer) or already the rank's part (slice_layer's or
  // Checkpoint::load_layer_shard's), told apart by the shapes of w1_blocks and w2_blocks; where both fit
  // (a world of one) they are taken as the whole layer. A tensor-parallel rank other than 0 does not
  // read w2_bias (rank 0 adds b2).
  ShardedLayer(const MoeConfig& config, const ShardSpec& spec, const InArray& w1_blocks, const InArray& w1_scales,
               std::optional<InArray> w1_bias, const InArray& w2_blocks, const InArray& w2_scales,
               std::optional<InArray> w2_bias, const std::string& backend, int64_t max_tokens,
               const std::optional<std::string>& plan)
      : config_(config) {
    config_.validate();
    shard_ = resolve_named(config_, spec, "shard");
    MoeLayerData data;
    if (fits_layer(config_, w1_blocks, w2_blocks)) {
      data = slice_layer(shard_, read_layer(config_, w1_blocks, w1_scales, w1_bias, w2_blocks, w2_scales, w2_bias));
      sliced_ = true;
    } else if (fits_layer(shard_.local, w1_blocks, w2_blocks)) {
      data = read_layer(shard_.local, w1_blocks, w1_scales, w1_bias, w2_blocks, w2_scales, w2_bias,
                        shard_.has_w2_bias);
    } else {
      detail::throw_error("weights: w1_blocks ", shape_text(w1_blocks), " and w2_blocks ", shape_text(w2_blocks),
                          " are neither the whole layer's (", layer_shapes(config_), ") nor rank ", spec.rank,
                          " of ", spec.world_size, "'s ", to_string(spec.mode), "-parallel part (",
                          layer_shapes(shard_.local), ")");
    }
    const RunnerOptions options = runner_options(backend, max_tokens, plan);
    try {
      moe_ = std::make_unique<ShardedMoe>(shard_, data.view(), options);
    } catch (const Error& e) {
      // What a shard cannot run (say, too few experts for a rank) is a fault of the spec.
      if (std::string_view(e.what()).starts_with("ShardSpec")) detail::throw_error("shard: ", e.what());
      throw;
    }
    const size_t bytes = std::max<size_t>(moe_->workspace_bytes(), 1);
    if (moe_->runner().on_gpu()) {
      device_workspace_ = DeviceBuffer(bytes);
    } else {
      host_workspace_.assign((bytes + 7) / 8, 0);  // 8-byte units: aligned for the pairs and sums in it
      host_data_ = std::move(data);                // the fp32 partial's oracle reads it (forward_f32)
    }
  }

  // The rank's partial output of hidden [T, H] bf16 routed by the whole layer's router_logits [T, E]
  // fp32: out [T, H] bf16, or fp32 sums before the rounding (forward_f32).
  void forward(const InArray& hidden, const InArray& logits, Array& out, uintptr_t stream) {
    const int64_t tokens = check_hidden_and_out(runner(), config_.hidden, hidden, out);
    check_logits(runner(), config_, logits, tokens);
    const auto* h = static_cast<const uint16_t*>(hidden.data());
    const auto* l = static_cast<const float*>(logits.data());
    auto* o = static_cast<uint16_t*>(out.data());
    nb::gil_scoped_release release;
    moe_->forward_partial(h, l, tokens, o, workspace(), workspace_bytes(), reinterpret_cast<cudaStream_t>(stream));
  }
  // On the CPU reference (whose ShardedMoe has bf16 partials only) the fp32 partial is the shard's fp64
  // oracle (reference_shard_f64) rounded to fp32.
  void forward_f32(const InArray& hidden, const InArray& logits, Array& out, uintptr_t stream) {
    const int64_t tokens = check_hidden_and_out(runner(), config_.hidden, hidden, out, /*out_f32=*/true);
    check_logits(runner(), config_, logits, tokens);
    const auto* h = static_cast<const uint16_t*>(hidden.data());
    const auto* l = static_cast<const float*>(logits.data());
    auto* o = static_cast<float*>(out.data());
    nb::gil_scoped_release release;
    if (runner().on_gpu()) {
      moe_->forward_partial_f32(h, l, tokens, o, workspace(), workspace_bytes(),
                                reinterpret_cast<cudaStream_t>(stream));
      return;
    }
    MXMOE_REQUIRE(tokens <= max_tokens(), "tokens = ", tokens, ": expected in [0, max_tokens = ", max_tokens(), "]");
    const auto n = static_cast<size_t>(tokens) * static_cast<size_t>(config_.hidden);
    std::vector<double> sums(n);
    reference_shard_f64(shard_, host_data_.view(), std::span(h, n),
                        std::span(l, static_cast<size_t>(tokens) * static_cast<size_t>(config_.num_experts)), tokens,
                        sums);
    std::transform(sums.begin(), sums.end(), o, [](double v) { return static_cast<float>(v); });
  }

  // The partial routed by the caller's topk_ids [T, k] (the whole layer's expert ids, int32 or int64)
  // and topk_weights [T, k] fp32 (MoeRunner::forward_routed's rules).
  void forward_routed(const InArray& hidden, const InArray& ids, const InArray& weights, Array& out,
                      uintptr_t stream) {
    forward_routed_arrays(*moe_, runner(), config_, hidden, ids, weights, out, workspace(), workspace_bytes(), stream);
  }

  std::string backend() const { return to_string(runner().backend()); }
  std::string describe_plan(int64_t tokens) const { return runner().describe_plan(tokens); }
  int64_t max_tokens() const { return moe_->max_tokens(); }
  const MoeConfig& config() const { return config_; }
  const MoeConfig& local_config() const { return shard_.local; }
  const ShardSpec& spec() const { return shard_.spec; }
  const std::vector<int32_t>& local_experts() const { return shard_.local_experts; }
  int block_begin() const { return shard_.block_begin; }
  int block_count() const { return shard_.block_count; }
  bool has_w2_bias() const { return shard_.has_w2_bias; }
  bool sliced() const { return sliced_; }

 private:
  const MoeRunner& runner() const { return moe_->runner(); }
  void* workspace() {
    return moe_->runner().on_gpu() ? device_workspace_.get() : static_cast<void*>(host_workspace_.data());
  }
  size_t workspace_bytes() const {
    return moe_->runner().on_gpu() ? device_workspace_.bytes() : host_workspace_.size() * sizeof(uint64_t);
  }

  MoeConfig config_;
  LayerShard shard_;
  bool sliced_ = false;  // the weights were the whole layer, sliced here
  std::unique_ptr<ShardedMoe> moe_;
  DeviceBuffer device_workspace_;
  std::vector<uint64_t> host_workspace_;
  MoeLayerData host_data_;  // the rank's weights, on the CPU reference only
};

}  // namespace mxmoe::python
