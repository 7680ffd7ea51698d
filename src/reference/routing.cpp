// CPU reference routing: router logits and top-k + softmax in both orders (FACTS.md §1).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include "mxmoe/error.hpp"
#include "mxmoe/formats.hpp"
#include "mxmoe/reference.hpp"
#include "reference/routed_reference.hpp"

namespace mxmoe {
namespace {

void require_span(const char* function, const char* name, size_t actual, int64_t expected, const char* shape) {
  MXMOE_REQUIRE(static_cast<int64_t>(actual) == expected, function, ": ", name, " has ", actual,
                " elements, expected ", expected, " (", shape, ")");
}

}  // namespace

void reference_route(const MoeConfig& config, std::span<const float> logits, int64_t tokens,
                     std::span<int32_t> ids, std::span<float> weights) {
  config.validate();
  MXMOE_REQUIRE(tokens >= 0, "reference_route: tokens = ", tokens, ", expected >= 0");
  const int experts = config.num_experts;
  const int k = config.top_k;
  require_span("reference_route", "logits", logits.size(), tokens * experts, "[T, E]");
  require_span("reference_route", "ids", ids.size(), tokens * k, "[T, k]");
  require_span("reference_route", "weights", weights.size(), tokens * k, "[T, k]");

  const size_t e_count = static_cast<size_t>(experts);
  const size_t k_count = static_cast<size_t>(k);
  std::vector<int32_t> order(e_count);
  std::vector<double> value(e_count);
  std::vector<double> p(k_count);
  for (int64_t t = 0; t < tokens; ++t) {
    const float* row = logits.data() + t * experts;
    for (size_t e = 0; e < e_count; ++e) {
      // A NaN would make the top-k order undefined; infinities make the softmax NaN.
      MXMOE_REQUIRE(std::isfinite(row[e]), "reference_route: logits[", t, ", ", e, "] = ", row[e],
                    ", expected a finite value");
      value[e] = row[e];
    }
    // Softmax is strictly increasing, so selecting by logit is selecting by probability, and the
    // tie rule (lower expert id first) is the same for both orders.
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      const double va = value[static_cast<size_t>(a)], vb = value[static_cast<size_t>(b)];
      return va > vb || (va == vb && a < b);
    });

    // Both orders subtract the largest logit (the first selected one) before exp.
    const double max_logit = value[static_cast<size_t>(order[0])];
    double selected_sum = 0.0;
    for (size_t s = 0; s < k_count; ++s) {
      p[s] = std::exp(value[static_cast<size_t>(order[s])] - max_logit);
      selected_sum += p[s];
    }
    double denominator = selected_sum;
    if (config.routing == RoutingOrder::SoftmaxThenTopk && !config.renormalize) {
      denominator = 0.0;
      for (size_t e = 0; e < e_count; ++e) denominator += std::exp(value[e] - max_logit);
    }
    int32_t* row_ids = ids.data() + t * k;
    float* row_weights = weights.data() + t * k;
    for (size_t s = 0; s < k_count; ++s) {
      row_ids[s] = order[s];
      row_weights[s] = static_cast<float>(p[s] / denominator);
    }
  }
}

void check_routed_input(const MoeConfig& config, std::span<const int32_t> ids, std::span<const float> weights,
                        int64_t tokens) {
  MXMOE_REQUIRE(tokens >= 0, "tokens: ", tokens, ", expected >= 0");
  const int64_t k = config.top_k;
  MXMOE_REQUIRE(static_cast<int64_t>(ids.size()) == tokens * k, "topk_ids: ", ids.size(), " elements, expected ",
                tokens * k, " ([T, k] with T = ", tokens, ", k = ", k, ")");
  MXMOE_REQUIRE(static_cast<int64_t>(weights.size()) == tokens * k, "topk_weights: ", weights.size(),
                " elements, expected ", tokens * k, " ([T, k] with T = ", tokens, ", k = ", k, ")");
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t s = 0; s < k; ++s) {
      const auto p = static_cast<size_t>(t * k + s);
      if (ids[p] == kDroppedPairId) continue;  // a dropped pair: no expert, its weight unused
      MXMOE_REQUIRE(ids[p] >= 0 && ids[p] < config.num_experts, "topk_ids[", t, ", ", s, "] = ", ids[p],
                    ": expected an expert id in [0, ", config.num_experts, ") or -1 (a dropped pair)");
      // Each expert at most once per token: every backend's kernels hold an expert's rows to <= T.
      for (int64_t before = 0; before < s; ++before)
        MXMOE_REQUIRE(ids[static_cast<size_t>(t * k + before)] != ids[p], "topk_ids: token ", t, " names expert ",
                      ids[p], " twice (slots ", before, " and ", s, "); a token's k experts must be distinct");
      MXMOE_REQUIRE(std::isfinite(weights[p]) && weights[p] >= 0.f, "topk_weights[", t, ", ", s, "] = ", weights[p],
                    ": expected a finite weight >= 0");
    }
  }
}

std::vector<int32_t> narrow_routed_ids(std::span<const int64_t> ids, int top_k, int experts) {
  std::vector<int32_t> out(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    MXMOE_REQUIRE(ids[i] == kDroppedPairId || (ids[i] >= 0 && ids[i] < experts), "topk_ids[",
                  i / static_cast<size_t>(top_k), ", ", i % static_cast<size_t>(top_k), "] = ", ids[i],
                  ": expected an expert id in [0, ", experts, ") or -1 (a dropped pair)");
    out[i] = static_cast<int32_t>(ids[i]);
  }
  return out;
}

void reference_router_logits(const MoeConfig& config, std::span<const uint16_t> hidden, int64_t tokens,
                             std::span<const uint16_t> router_weight, std::span<const uint16_t> router_bias,
                             std::span<float> logits) {
  config.validate();
  MXMOE_REQUIRE(tokens >= 0, "reference_router_logits: tokens = ", tokens, ", expected >= 0");
  const int64_t experts = config.num_experts;
  const int64_t h = config.hidden;
  require_span("reference_router_logits", "hidden", hidden.size(), tokens * h, "[T, H]");
  require_span("reference_router_logits", "router_weight", router_weight.size(), experts * h, "[E, H]");
  if (!router_bias.empty())
    require_span("reference_router_logits", "router_bias", router_bias.size(), experts, "[E], or empty");
  require_span("reference_router_logits", "logits", logits.size(), tokens * experts, "[T, E]");

  std::vector<double> weight(router_weight.size());
  for (size_t i = 0; i < weight.size(); ++i) weight[i] = bf16_to_float(router_weight[i]);
  std::vector<double> x(static_cast<size_t>(h));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < h; ++j) x[static_cast<size_t>(j)] = bf16_to_float(hidden[static_cast<size_t>(t * h + j)]);
    for (int64_t e = 0; e < experts; ++e) {
      const double* w = weight.data() + e * h;
      double acc = 0.0;
      for (int64_t j = 0; j < h; ++j) acc += w[j] * x[static_cast<size_t>(j)];
      if (!router_bias.empty()) acc += bf16_to_float(router_bias[static_cast<size_t>(e)]);
      logits[static_cast<size_t>(t * experts + e)] = static_cast<float>(acc);
    }
  }
}

}  // namespace mxmoe
