// ShardedMoe::forward_data_parallel (mxmoe/sharded_moe.hpp): ranks that hold different tokens. NCCL
// all-gathers every rank's hidden states and routing (one group: one launch), the rank computes its
// partial over all of them, and a reduce-scatter sums the partials and hands each rank its own tokens.
#include <cuda_runtime.h>

#include <cstdint>

#include "moe/nccl_check.hpp"
#include "mxmoe/error.hpp"
#include "mxmoe/sharded_moe.hpp"

namespace mxmoe {

void ShardedMoe::forward_data_parallel(const uint16_t* hidden, const float* router_logits, int64_t tokens,
                                       uint16_t* out, void* workspace, size_t workspace_size,
                                       cudaStream_t stream) const {
  MXMOE_REQUIRE(router_logits != nullptr || tokens == 0, "router_logits: null pointer");
  run_data_parallel({hidden, router_logits, nullptr, false, nullptr, tokens}, out, workspace, workspace_size, stream);
}

void ShardedMoe::forward_data_parallel(const uint16_t* hidden, const int32_t* topk_ids, const float* topk_weights,
                                       int64_t tokens, uint16_t* out, void* workspace, size_t workspace_size,
                                       cudaStream_t stream) const {
  MXMOE_REQUIRE(tokens == 0 || (topk_ids != nullptr && topk_weights != nullptr), "topk_ids, topk_weights: null pointer");
  run_data_parallel({hidden, nullptr, topk_ids, false, topk_weights, tokens}, out, workspace, workspace_size, stream);
}

void ShardedMoe::forward_data_parallel(const uint16_t* hidden, const int64_t* topk_ids, const float* topk_weights,
                                       int64_t tokens, uint16_t* out, void* workspace, size_t workspace_size,
                                       cudaStream_t stream) const {
  MXMOE_REQUIRE(tokens == 0 || (topk_ids != nullptr && topk_weights != nullptr), "topk_ids, topk_weights: null pointer");
  run_data_parallel({hidden, nullptr, topk_ids, true, topk_weights, tokens}, out, workspace, workspace_size, stream);
}

void ShardedMoe::run_data_parallel(const Inputs& in, uint16_t* out, void* workspace, size_t workspace_size,
                                   cudaStream_t stream) const {
  MXMOE_REQUIRE(comm_ != nullptr, "forward_data_parallel: this ShardedMoe has no communicator");
  const int64_t world = shard_.spec.world_size;
  MXMOE_REQUIRE(in.tokens >= 0 && in.tokens * world <= runner_->max_tokens(), "tokens = ", in.tokens,
                ": expected in [0, max_tokens / world_size = ", runner_->max_tokens() / world, "] (the ", world,
                " ranks' tokens are gathered)");
  Inputs gathered = in;
  gathered.tokens = in.tokens * world;
  if (!check_run(gathered, out, workspace, workspace_size, true)) return;  // every rank has the same T
  MXMOE_REQUIRE(in.hidden != nullptr, "hidden: null pointer");
#if MXMOE_HAVE_NCCL
  const Layout l = layout();
  auto* base = static_cast<uint8_t*>(workspace);
  const auto T = static_cast<size_t>(in.tokens);
  const size_t H = shard_.full.hidden, E = shard_.full.num_experts, k = shard_.full.top_k;
  gathered.hidden = reinterpret_cast<const uint16_t*>(base + l.gather_hidden);
  nccl_check(ncclGroupStart(), "ncclGroupStart");
  nccl_check(ncclAllGather(in.hidden, base + l.gather_hidden, T * H, ncclBfloat16, comm_, stream), "ncclAllGather");
  if (in.ids == nullptr) {
    gathered.logits = reinterpret_cast<const float*>(base + l.gather_route);
    nccl_check(ncclAllGather(in.logits, base + l.gather_route, T * E, ncclFloat32, comm_, stream), "ncclAllGather");
  } else {
    gathered.ids = base + l.gather_route;
    gathered.weights = reinterpret_cast<const float*>(base + l.gather_weights);
    nccl_check(ncclAllGather(in.ids, base + l.gather_route, T * k, in.ids64 ? ncclInt64 : ncclInt32, comm_, stream),
               "ncclAllGather");
    nccl_check(ncclAllGather(in.weights, base + l.gather_weights, T * k, ncclFloat32, comm_, stream), "ncclAllGather");
  }
  nccl_check(ncclGroupEnd(), "ncclGroupEnd");
  void* partial = base + l.gather_partial;
  if (fp32_partials_) {
    run(gathered, nullptr, static_cast<float*>(partial), workspace, workspace_size, stream, false);
    nccl_check(ncclReduceScatter(partial, sum_f32(workspace), T * H, ncclFloat32, ncclSum, comm_, stream),
               "ncclReduceScatter");
    finish_f32(out, in.tokens, workspace, stream);
  } else {
    run(gathered, static_cast<uint16_t*>(partial), nullptr, workspace, workspace_size, stream, false);
    nccl_check(ncclReduceScatter(partial, out, T * H, ncclBfloat16, ncclSum, comm_, stream), "ncclReduceScatter");
  }
#else
  (void)out;
  (void)stream;
#endif
}

}  // namespace mxmoe
