// ShardedMoe (mxmoe/sharded_moe.hpp): a rank's runner over its shard, the expert-parallel map of the
// routing (moe/sharded_route.hpp) and the NCCL all-reduce of the partial outputs on the runner's stream.
#include "mxmoe/sharded_moe.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "common/cuda_check.hpp"
#include "moe/sharded_convert.hpp"
#include "moe/sharded_route.hpp"
#include "moe/nccl_check.hpp"
#include "mxmoe/error.hpp"
#include "mxmoe/reference.hpp"
#include "reference/routed_reference.hpp"

namespace mxmoe {
namespace {

constexpr size_t kAlign = 256;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

bool nccl_available() {
#if MXMOE_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

ShardedMoe::ShardedMoe(const LayerShard& shard, const MoeWeights& weights, const RunnerOptions& options,
                       ncclComm_t comm, bool fp32_partials)
    : shard_(shard), comm_(comm), fp32_partials_(fp32_partials) {
  weights.validate(shard_.local);
  if (comm != nullptr) {
#if MXMOE_HAVE_NCCL
    int count = 0, rank = 0, device = -1, current = -1;
    nccl_check(ncclCommCount(comm, &count), "ncclCommCount");
    nccl_check(ncclCommUserRank(comm, &rank), "ncclCommUserRank");
    nccl_check(ncclCommCuDevice(comm, &device), "ncclCommCuDevice");
    MXMOE_CUDA_CHECK(cudaGetDevice(&current));
    MXMOE_REQUIRE(count == shard_.spec.world_size && rank == shard_.spec.rank, "comm: a communicator of ", count,
                  " ranks in which this is rank ", rank, ", but the shard is rank ", shard_.spec.rank, " of ",
                  shard_.spec.world_size);
    MXMOE_REQUIRE(device == current, "comm: its device is ", device, ", but the current CUDA device is ", current);
#else
    detail::throw_error("comm: this mxmoe build has no NCCL (configure with MXMOE_NCCL_ROOT); pass no communicator "
                        "and sum the partial outputs yourself");
#endif
  }
  // Expert-parallel: the rank's own experts only; pairs of other ranks' experts are dropped in the route
  // (sharded_route.hpp), so they cost nothing. A bad token's k pairs then need k local experts.
  MXMOE_REQUIRE(shard_.spec.mode == ShardMode::Tensor || shard_.local.num_experts >= shard_.full.top_k, "ShardSpec: rank ",
                shard_.spec.rank, " owns ", shard_.local.num_experts, " experts; expert-parallel needs at least k = ",
                shard_.full.top_k, " per rank (world_size <= E / k)");
  // W4A8 on a shard (a rank's slice of I in GEMM1's e4m3 output) has not run on GPUs: refused.
  MXMOE_REQUIRE(options.precision == Precision::Bf16, "precision: a sharded layer runs bf16 activations only");
  MoeConfig rank_config = shard_.local;
  rank_config.top_k = shard_.full.top_k;  // every token's k pairs, the other ranks' dropped
  RunnerOptions rank_options = options;
  // An expert-parallel rank's tiles are planned for its share of the pairs.
  if (shard_.spec.mode == ShardMode::Expert) rank_options.routed_experts = shard_.full.num_experts;
  runner_ = std::make_unique<MoeRunner>(rank_config, weights, rank_options);
  MXMOE_REQUIRE(runner_->on_gpu() || comm == nullptr, "comm: backend '", to_string(runner_->backend()),
                "' runs on the host; a communicator needs a GPU backend");
  if (!runner_->on_gpu()) return;  // the host path (run_on_host) needs no device state
  MXMOE_CUDA_CHECK(cudaGetDevice(&device_));
  if (shard_.spec.mode == ShardMode::Expert) {
    // The map [E] on the runner's device (the current one).
    int32_t* map = nullptr;
    const size_t map_bytes = shard_.global_to_local.size() * sizeof(int32_t);
    MXMOE_CUDA_CHECK(cudaMalloc(&map, map_bytes));
    map_ = std::shared_ptr<int32_t>(map, [](int32_t* p) { cudaFree(p); });
    MXMOE_CUDA_CHECK(cudaMemcpy(map, shard_.global_to_local.data(), map_bytes, cudaMemcpyHostToDevice));
  }
}

ShardedMoe::~ShardedMoe() = default;
ShardedMoe::ShardedMoe(ShardedMoe&&) noexcept = default;
ShardedMoe& ShardedMoe::operator=(ShardedMoe&&) noexcept = default;

// The runner's workspace; (expert-parallel) the local ids and weights [max_tokens, k]; (fp32 partials
// with a communicator) their sum [max_tokens, H]: `total`, what forward needs. Then (with a communicator)
// forward_data_parallel's gathered hidden [max_tokens, H], routing (logits [max_tokens, E] or int64 ids
// [max_tokens, k]), weights [max_tokens, k] and partial [max_tokens, H] (fp32 with fp32 partials):
// `data_parallel_total`. The first parts sit at the same offsets in both.
ShardedMoe::Layout ShardedMoe::layout() const {
  const auto tokens = static_cast<size_t>(runner_->max_tokens());
  const size_t H = shard_.full.hidden, E = shard_.full.num_experts, k = shard_.full.top_k;
  Layout l;
  size_t at = 0;
  const auto take = [&at](size_t bytes) {
    const size_t offset = at;
    at += align_up(bytes);
    return offset;
  };
  l.runner = take(runner_->workspace_bytes());
  if (shard_.spec.mode == ShardMode::Expert) {
    l.local_ids = take(tokens * k * 4);
    l.local_weights = take(tokens * k * 4);
  }
  if (comm_ != nullptr && fp32_partials_) l.sum_f32 = take(tokens * H * 4);
  l.total = at;
  if (comm_ != nullptr) {
    l.gather_hidden = take(tokens * H * 2);
    l.gather_route = take(tokens * std::max(E * 4, k * 8));
    l.gather_weights = take(tokens * k * 4);
    l.gather_partial = take(tokens * H * (fp32_partials_ ? 4 : 2));
  }
  l.data_parallel_total = at;
  return l;
}

size_t ShardedMoe::workspace_bytes() const { return runner_->on_gpu() ? layout().total : 0; }

size_t ShardedMoe::data_parallel_workspace_bytes() const {
  return runner_->on_gpu() ? layout().data_parallel_total : 0;
}

void ShardedMoe::forward(const uint16_t* hidden, const float* router_logits, int64_t tokens, uint16_t* out,
                         void* workspace, size_t workspace_size, cudaStream_t stream) const {
  MXMOE_REQUIRE(router_logits != nullptr || tokens == 0, "router_logits: null pointer");
  run({hidden, router_logits, nullptr, false, nullptr, tokens}, out, nullptr, workspace, workspace_size, stream, true);
}

void ShardedMoe::forward_routed(const uint16_t* hidden, const int32_t* topk_ids, const float* topk_weights,
                                int64_t tokens, uint16_t* out, void* workspace, size_t workspace_size,
                                cudaStream_t stream) const {
  MXMOE_REQUIRE(tokens == 0 || (topk_ids != nullptr && topk_weights != nullptr), "topk_ids, topk_weights: null pointer");
  run({hidden, nullptr, topk_ids, false, topk_weights, tokens}, out, nullptr, workspace, workspace_size, stream, true);
}

void ShardedMoe::forward_routed(const uint16_t* hidden, const int64_t* topk_ids, const float* topk_weights,
                                int64_t tokens, uint16_t* out, void* workspace, size_t workspace_size,
                                cudaStream_t stream) const {
  MXMOE_REQUIRE(tokens == 0 || (topk_ids != nullptr && topk_weights != nullptr), "topk_ids, topk_weights: null pointer");
  run({hidden, nullptr, topk_ids, true, topk_weights, tokens}, out, nullptr, workspace, workspace_size, stream, true);
}

void ShardedMoe::forward_partial(const uint16_t* hidden, const float* router_logits, int64_t tokens, uint16_t* out,
                                 void* workspace, size_t workspace_size, cudaStream_t stream) const {
  MXMOE_REQUIRE(router_logits != nullptr || tokens == 0, "router_logits: null pointer");
  run({hidden, router_logits, nullptr, false, nullptr, tokens}, out, nullptr, workspace, workspace_size, stream, false);
}

void ShardedMoe::forward_partial_f32(const uint16_t* hidden, const float* router_logits, int64_t tokens, float* out,
                                     void* workspace, size_t workspace_size, cudaStream_t stream) const {
  MXMOE_REQUIRE(router_logits != nullptr || tokens == 0, "router_logits: null pointer");
  run({hidden, router_logits, nullptr, false, nullptr, tokens}, nullptr, out, workspace, workspace_size, stream, false);
}

void ShardedMoe::forward_ranks(const std::vector<const ShardedMoe*>& ranks, const std::vector<RankForward>& io,
                               int64_t tokens) {
  MXMOE_REQUIRE(ranks.size() == io.size(), "forward_ranks: ", ranks.size(), " ranks but ", io.size(), " inputs");
  int current = 0;
  MXMOE_CUDA_CHECK(cudaGetDevice(&current));
  nccl_group_start();
  try {
    for (size_t r = 0; r < ranks.size(); ++r) {
      MXMOE_REQUIRE(ranks[r] != nullptr, "forward_ranks: rank ", r, " is null");
      const RankForward& f = io[r];
      MXMOE_REQUIRE(f.router_logits != nullptr || tokens == 0, "router_logits: null pointer (rank ", r, ")");
      MXMOE_CUDA_CHECK(cudaSetDevice(ranks[r]->device_));
      ranks[r]->run({f.hidden, f.router_logits, nullptr, false, nullptr, tokens}, f.out, nullptr, f.workspace,
                    f.workspace_size, f.stream, true, false);
    }
  } catch (...) {
    nccl_group_end();
    cudaSetDevice(current);
    throw;
  }
  nccl_group_end();
  for (size_t r = 0; r < ranks.size(); ++r)
    if (ranks[r]->fp32_partials_ && ranks[r]->comm_ != nullptr && tokens > 0) {
      MXMOE_CUDA_CHECK(cudaSetDevice(ranks[r]->device_));
      ranks[r]->finish_f32(io[r].out, tokens, io[r].workspace, io[r].stream);
    }
  MXMOE_CUDA_CHECK(cudaSetDevice(current));
}

float* ShardedMoe::sum_f32(void* workspace) const {
  return reinterpret_cast<float*>(static_cast<uint8_t*>(workspace) + layout().sum_f32);
}

void ShardedMoe::finish_f32(uint16_t* out, int64_t tokens, void* workspace, cudaStream_t stream) const {
  sharded::f32_to_bf16(sum_f32(workspace), out, static_cast<size_t>(tokens) * shard_.full.hidden, stream);
}

bool ShardedMoe::check_run(const Inputs& in, const void* out, void* workspace, size_t workspace_size,
                           bool data_parallel) const {
  MXMOE_REQUIRE(in.tokens >= 0 && in.tokens <= runner_->max_tokens(), "tokens = ", in.tokens,
                ": expected in [0, max_tokens = ", runner_->max_tokens(), "]");
  const size_t needed = data_parallel ? data_parallel_workspace_bytes() : workspace_bytes();
  MXMOE_REQUIRE(workspace_size >= needed, "workspace_size = ", workspace_size, ": expected at least ", needed,
                " bytes (ShardedMoe::", data_parallel ? "data_parallel_workspace_bytes" : "workspace_bytes", ")");
  MXMOE_REQUIRE(workspace != nullptr || workspace_size == 0, "workspace: null");
  MXMOE_REQUIRE(out != nullptr || in.tokens == 0, "out: null pointer");
  return in.tokens > 0;
}

void ShardedMoe::run(const Inputs& in, uint16_t* out, float* out_f32, void* workspace, size_t workspace_size,
                     cudaStream_t stream, bool reduce, bool finish) const {
  const int64_t tokens = in.tokens;
  if (!check_run(in, out != nullptr ? static_cast<const void*>(out) : out_f32, workspace, workspace_size))
    return;  // every rank has the same T: no rank calls the collective
  if (!runner_->on_gpu()) {
    MXMOE_REQUIRE(out_f32 == nullptr, "out: fp32 partials need a GPU backend");
    run_on_host(in, out);
    return;
  }
  const Layout l = layout();
  auto* base = static_cast<uint8_t*>(workspace);
  // The fp32 partials of a reducing forward: summed in the workspace, rounded once into out.
  float* sum = reduce && comm_ != nullptr && fp32_partials_ ? sum_f32(workspace) : nullptr;
  float* partial_f32 = sum != nullptr ? sum : out_f32;

  const void* ids = in.ids;
  bool ids64 = in.ids64;
  const float* weights = in.weights;
  if (shard_.spec.mode == ShardMode::Expert) {
    sharded::LocalizeArgs a;
    a.logits = in.logits;
    a.ids = in.ids;
    a.ids64 = in.ids64;
    a.weights = in.weights;
    a.global_to_local = map_.get();
    a.tokens = static_cast<int>(tokens);
    a.experts = shard_.full.num_experts;
    a.top_k = shard_.full.top_k;
    a.local_experts = shard_.local.num_experts;
    a.softmax_first = shard_.full.routing == RoutingOrder::SoftmaxThenTopk;
    a.renormalize = shard_.full.renormalize;
    a.local_ids = reinterpret_cast<int32_t*>(base + l.local_ids);
    a.local_weights = reinterpret_cast<float*>(base + l.local_weights);
    sharded::localize_pairs(a, stream);
    ids = a.local_ids;
    ids64 = false;
    weights = a.local_weights;
  }
  const MoeRunner& r = *runner_;
  const size_t runner_bytes = r.workspace_bytes();
  if (ids == nullptr && partial_f32 != nullptr)
    r.forward_f32(in.hidden, in.logits, tokens, partial_f32, workspace, runner_bytes, stream);
  else if (ids == nullptr)
    r.forward(in.hidden, in.logits, tokens, out, workspace, runner_bytes, stream);
  else if (partial_f32 != nullptr && ids64)
    r.forward_routed_f32(in.hidden, static_cast<const int64_t*>(ids), weights, tokens, partial_f32, workspace,
                         runner_bytes, stream);
  else if (partial_f32 != nullptr)
    r.forward_routed_f32(in.hidden, static_cast<const int32_t*>(ids), weights, tokens, partial_f32, workspace,
                         runner_bytes, stream);
  else if (ids64)
    r.forward_routed(in.hidden, static_cast<const int64_t*>(ids), weights, tokens, out, workspace, runner_bytes, stream);
  else
    r.forward_routed(in.hidden, static_cast<const int32_t*>(ids), weights, tokens, out, workspace, runner_bytes, stream);
  if (!reduce || comm_ == nullptr) return;
  if (sum == nullptr) {
    all_reduce(out, tokens, stream);
    return;
  }
#if MXMOE_HAVE_NCCL
  const size_t count = static_cast<size_t>(tokens) * shard_.full.hidden;
  nccl_check(ncclAllReduce(sum, sum, count, ncclFloat32, ncclSum, comm_, stream), "ncclAllReduce");
#endif
  if (finish) finish_f32(out, tokens, workspace, stream);
}

void ShardedMoe::run_on_host(const Inputs& in, uint16_t* out) const {
  const auto tokens = static_cast<size_t>(in.tokens), k = static_cast<size_t>(shard_.full.top_k);
  if (shard_.spec.mode == ShardMode::Tensor) {
    if (in.ids == nullptr)
      runner_->forward(in.hidden, in.logits, in.tokens, out, nullptr, 0);
    else if (in.ids64)
      runner_->forward_routed(in.hidden, static_cast<const int64_t*>(in.ids), in.weights, in.tokens, out, nullptr, 0);
    else
      runner_->forward_routed(in.hidden, static_cast<const int32_t*>(in.ids), in.weights, in.tokens, out, nullptr, 0);
    return;
  }
  // Expert-parallel: the whole layer's routing (or the engine's, checked by the rank's runner after the
  // map), each pair mapped to this rank's expert or dropped.
  std::vector<int32_t> ids(tokens * k);
  std::vector<float> weights(tokens * k);
  if (in.ids == nullptr) {
    reference_route(shard_.full, std::span(in.logits, tokens * shard_.full.num_experts), in.tokens, ids, weights);
  } else {
    // The global ids, in range or -1 (before they index the map), by the reference's own check.
    std::vector<int64_t> wide(ids.size());
    if (in.ids64)
      std::copy_n(static_cast<const int64_t*>(in.ids), wide.size(), wide.begin());
    else
      std::copy_n(static_cast<const int32_t*>(in.ids), wide.size(), wide.begin());
    ids = narrow_routed_ids(wide, shard_.full.top_k, shard_.full.num_experts);
    std::copy(in.weights, in.weights + ids.size(), weights.begin());
  }
  for (int32_t& id : ids)
    if (id != kDroppedPairId) id = shard_.global_to_local[static_cast<size_t>(id)];
  runner_->forward_routed(in.hidden, ids.data(), weights.data(), in.tokens, out, nullptr, 0);
}

void ShardedMoe::all_reduce(uint16_t* out, int64_t tokens, cudaStream_t stream) const {
  MXMOE_REQUIRE(comm_ != nullptr, "all_reduce: this ShardedMoe has no communicator");
  MXMOE_REQUIRE(out != nullptr || tokens == 0, "out: null pointer");
  if (tokens == 0) return;  // every rank has the same T: every rank skips
#if MXMOE_HAVE_NCCL
  const size_t count = static_cast<size_t>(tokens) * shard_.full.hidden;
  nccl_check(ncclAllReduce(out, out, count, ncclBfloat16, ncclSum, comm_, stream), "ncclAllReduce");
#else
  (void)out;
  (void)stream;
#endif
}

}  // namespace mxmoe
