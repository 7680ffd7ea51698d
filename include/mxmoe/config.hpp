#pragma once
// The shape and semantics of one MoE layer (FACTS.md §1).
#include <cstdint>
#include <string>
#include <vector>

namespace mxmoe {

// Limits every backend supports (the routing kernels size their registers and shared memory by them).
inline constexpr int kMaxExperts = 256;
inline constexpr int kMaxTopk = 8;
// A routed pair's expert id that drops the pair (forward_routed: it adds nothing; vLLM's convention for
// an expert on another rank under expert parallelism).
inline constexpr int kDroppedPairId = -1;
inline constexpr int kMaxDim = 65536;  // hidden and intermediate

enum class RoutingOrder {
  TopkThenSoftmax,  // gpt-oss: softmax over the k selected logits
  SoftmaxThenTopk,  // softmax over all E logits, then top-k (optionally renormalised to sum 1)
};

struct MoeConfig {
  std::string name = "custom";
  int num_experts = 0;   // E
  int top_k = 0;         // k
  int hidden = 0;        // H (GEMM1 K, GEMM2 N)
  int intermediate = 0;  // I (GEMM1 N is 2I, GEMM2 K)
  RoutingOrder routing = RoutingOrder::TopkThenSoftmax;
  bool renormalize = false;  // SoftmaxThenTopk only
  float swiglu_alpha = 1.702f;
  float swiglu_limit = 7.0f;

  static MoeConfig gpt_oss_20b();   // E=32,  k=4, H=I=2880
  static MoeConfig gpt_oss_120b();  // E=128, k=4, H=I=2880
  static MoeConfig tiny();          // E=8, k=2, H=I=64: CPU-sized
  static MoeConfig preset(const std::string& name);  // "gpt-oss-20b", "gpt-oss-120b", "tiny"
  static std::vector<std::string> preset_names();

  // Throws mxmoe::Error naming the first invalid field: E in [1, 256], k in [1, min(E, 8)],
  // H and I positive multiples of 32 up to 65536, limit > 0.
  void validate() const;
};

std::string to_string(RoutingOrder order);

}  // namespace mxmoe
