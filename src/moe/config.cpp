// MoeConfig presets and validation (FACTS.md §1).
#include "mxmoe/config.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "mxmoe/error.hpp"

namespace mxmoe {
namespace {

// Limits of what the kernels are built for: scale blocks of 32 along K, at most 8 slots per token.
constexpr int kDimMultiple = 32;

MoeConfig make_config(const char* name, int experts, int top_k, int hidden, int intermediate) {
  MoeConfig config;
  config.name = name;
  config.num_experts = experts;
  config.top_k = top_k;
  config.hidden = hidden;
  config.intermediate = intermediate;
  return config;  // gpt-oss routing and SwiGLU constants are the struct defaults
}

struct Preset {
  const char* name;
  MoeConfig (*make)();
};
constexpr std::array kPresets{
    Preset{"gpt-oss-20b", &MoeConfig::gpt_oss_20b},
    Preset{"gpt-oss-120b", &MoeConfig::gpt_oss_120b},
    Preset{"tiny", &MoeConfig::tiny},
};

void require_dim(const char* field, int value) {
  MXMOE_REQUIRE(value > 0 && value % kDimMultiple == 0 && value <= kMaxDim, "MoeConfig.", field, " = ", value,
                ": expected a positive multiple of ", kDimMultiple, " (the MX block size) up to ", kMaxDim);
}

}  // namespace

MoeConfig MoeConfig::gpt_oss_20b() { return make_config("gpt-oss-20b", 32, 4, 2880, 2880); }
MoeConfig MoeConfig::gpt_oss_120b() { return make_config("gpt-oss-120b", 128, 4, 2880, 2880); }
MoeConfig MoeConfig::tiny() { return make_config("tiny", 8, 2, 64, 64); }

std::vector<std::string> MoeConfig::preset_names() {
  std::vector<std::string> names;
  for (const auto& preset : kPresets) names.emplace_back(preset.name);
  return names;
}

MoeConfig MoeConfig::preset(const std::string& name) {
  for (const auto& preset : kPresets)
    if (name == preset.name) return preset.make();
  std::string valid;
  for (const auto& preset : kPresets) valid += (valid.empty() ? "" : ", ") + std::string(preset.name);
  detail::throw_error("MoeConfig preset: unknown name '", name, "'; valid presets are: ", valid);
}

void MoeConfig::validate() const {
  MXMOE_REQUIRE(num_experts >= 1 && num_experts <= kMaxExperts, "MoeConfig.num_experts = ", num_experts,
                ": expected a value in [1, ", kMaxExperts, "]");
  const int max_k = std::min(num_experts, kMaxTopk);
  MXMOE_REQUIRE(top_k >= 1 && top_k <= max_k, "MoeConfig.top_k = ", top_k, ": expected a value in [1, ", max_k,
                "] (min(num_experts = ", num_experts, ", ", kMaxTopk, "))");
  require_dim("hidden", hidden);
  require_dim("intermediate", intermediate);
  MXMOE_REQUIRE(std::isfinite(swiglu_limit) && swiglu_limit > 0.0f, "MoeConfig.swiglu_limit = ", swiglu_limit,
                ": expected a finite value > 0");
  MXMOE_REQUIRE(std::isfinite(swiglu_alpha), "MoeConfig.swiglu_alpha = ", swiglu_alpha,
                ": expected a finite value");
  MXMOE_REQUIRE(routing == RoutingOrder::TopkThenSoftmax || routing == RoutingOrder::SoftmaxThenTopk,
                "MoeConfig.routing = ", static_cast<int>(routing), ": expected a RoutingOrder value");
}

std::string to_string(RoutingOrder order) {
  switch (order) {
    case RoutingOrder::TopkThenSoftmax: return "topk_then_softmax";
    case RoutingOrder::SoftmaxThenTopk: return "softmax_then_topk";
  }
  return "unknown";
}

}  // namespace mxmoe
