// gpt-oss MoE tensor names in the two published namings (FACTS.md §2).
#include <string>

#include "mxmoe/checkpoint.hpp"
#include "mxmoe/error.hpp"

namespace mxmoe {

std::string to_string(TensorNaming naming) {
  switch (naming) {
    case TensorNaming::Original: return "original";
    case TensorNaming::HuggingFace: return "huggingface";
  }
  return "unknown";
}

LayerTensorNames layer_tensor_names(TensorNaming naming, int layer) {
  MXMOE_REQUIRE(layer >= 0, "layer_tensor_names: layer = ", layer, ": expected a non-negative layer index");
  const std::string n = std::to_string(layer);
  switch (naming) {
    case TensorNaming::Original: {
      const std::string p = "block." + n + ".mlp.";
      return {p + "gate.weight",
              p + "gate.bias",
              p + "mlp1_weight.blocks",
              p + "mlp1_weight.scales",
              p + "mlp1_bias",
              p + "mlp2_weight.blocks",
              p + "mlp2_weight.scales",
              p + "mlp2_bias"};
    }
    case TensorNaming::HuggingFace: {
      const std::string p = "model.layers." + n + ".mlp.";
      return {p + "router.weight",
              p + "router.bias",
              p + "experts.gate_up_proj_blocks",
              p + "experts.gate_up_proj_scales",
              p + "experts.gate_up_proj_bias",
              p + "experts.down_proj_blocks",
              p + "experts.down_proj_scales",
              p + "experts.down_proj_bias"};
    }
  }
  detail::throw_error("layer_tensor_names: naming = ", static_cast<int>(naming), ": expected a TensorNaming value");
}

}  // namespace mxmoe
