#pragma once
// ShardedMoe: one rank's shard of a layer (shard.hpp) on its GPU, with the tokens replicated on every
// rank (the layout after tensor-parallel attention). forward() computes the rank's partial output and,
// given an NCCL communicator, sums the ranks' partials in place by ncclAllReduce on the same stream
// (CUDA-graph capturable, as NCCL collectives are); without one, the caller sums (as engines that reduce
// the MoE output themselves do). The partials are bf16 by default (the sum rounds twice), or fp32.
//
// Expert-parallel ranks run their own experts only: each token's pairs of other ranks' experts are
// dropped in the route (kDroppedPairId), so a rank's work is its share of the pairs. forward_data_parallel
// serves ranks that hold different tokens (data-parallel attention): all-gather, the partial over every
// rank's tokens, reduce-scatter. On the reference backend (host pointers) a shard computes its partial
// on the CPU, without a communicator: sharding is testable without a GPU.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "mxmoe/runner.hpp"
#include "mxmoe/shard.hpp"

// NCCL's own handle type (nccl.h declares the same), so this header does not need nccl.h.
struct ncclComm;
typedef struct ncclComm* ncclComm_t;

namespace mxmoe {

// Whether this build links NCCL (a communicator can be given to ShardedMoe).
bool nccl_available();

// The communicators of one process driving GPUs 0 .. gpus-1 (ncclCommInitAll), destroyed with the
// object: for tests and `mxmoe bench-multi`. An Error without NCCL or with fewer GPUs.
class LocalNcclWorld {
 public:
  explicit LocalNcclWorld(int gpus);
  ~LocalNcclWorld();
  LocalNcclWorld(const LocalNcclWorld&) = delete;
  LocalNcclWorld& operator=(const LocalNcclWorld&) = delete;
  int size() const { return static_cast<int>(comms_.size()); }
  ncclComm_t comm(int rank) const { return comms_.at(static_cast<size_t>(rank)); }

 private:
  std::vector<ncclComm_t> comms_;
};
// ncclGroupStart / ncclGroupEnd: one thread issuing the collectives of several ranks, as NCCL requires of
// a single thread driving several GPUs (ShardedMoe::forward_ranks does this for forwards).
void nccl_group_start();
void nccl_group_end();

class ShardedMoe {
 public:
  // shard: resolve_shard(config, spec); weights: the rank's part (slice_layer or
  // Checkpoint::load_layer_shard). options: as for MoeRunner, on a GPU backend (the current device).
  // comm: a communicator of spec.world_size ranks in which this rank is spec.rank (checked), owned by the
  // caller and outliving this object; null: forward writes the partial only. fp32_partials: forward sums
  // the partials in fp32 (twice the collective's bytes) and rounds the sum once to bf16; otherwise the
  // bf16 partials are summed (rounded twice, a few bf16 ulps of the partials).
  ShardedMoe(const LayerShard& shard, const MoeWeights& weights, const RunnerOptions& options = {},
             ncclComm_t comm = nullptr, bool fp32_partials = false);
  ~ShardedMoe();
  ShardedMoe(ShardedMoe&&) noexcept;
  ShardedMoe& operator=(ShardedMoe&&) noexcept;

  const LayerShard& shard() const { return shard_; }
  const MoeRunner& runner() const { return *runner_; }
  bool reduces() const { return comm_ != nullptr; }
  bool fp32_partials() const { return fp32_partials_; }
  int64_t max_tokens() const { return runner_->max_tokens(); }
  // The workspace of forward and its kin: the runner's, plus (expert-parallel) the local routing and (with
  // a communicator and fp32 partials) the fp32 sum, for max_tokens; 0 on the reference backend.
  size_t workspace_bytes() const;
  // forward_data_parallel's: workspace_bytes() plus the gathered inputs and partial (with a communicator),
  // for max_tokens (at gpt-oss-120b's H and max_tokens 4096 about 50 MB more). Enough for forward too.
  size_t data_parallel_workspace_bytes() const;

  // hidden [T, H] bf16 (the same on every rank), router_logits [T, E] fp32 of the whole layer's E
  // experts, out [T, H] bf16, device pointers. With a communicator: out is the layer's output on every
  // rank; every rank must call it with the same T (a collective). Without: out is this rank's partial.
  void forward(const uint16_t* hidden, const float* router_logits, int64_t tokens, uint16_t* out, void* workspace,
               size_t workspace_size, cudaStream_t stream = nullptr) const;
  // The engine's routing over the whole layer's experts (MoeRunner::forward_routed's rules).
  void forward_routed(const uint16_t* hidden, const int32_t* topk_ids, const float* topk_weights, int64_t tokens,
                      uint16_t* out, void* workspace, size_t workspace_size, cudaStream_t stream = nullptr) const;
  void forward_routed(const uint16_t* hidden, const int64_t* topk_ids, const float* topk_weights, int64_t tokens,
                      uint16_t* out, void* workspace, size_t workspace_size, cudaStream_t stream = nullptr) const;
  // The partial output only, never reduced (what an engine that reduces itself sees; `bench` times it).
  void forward_partial(const uint16_t* hidden, const float* router_logits, int64_t tokens, uint16_t* out,
                       void* workspace, size_t workspace_size, cudaStream_t stream = nullptr) const;
  // The partial as fp32 sums, before the bf16 rounding (out [T, H] fp32, 16-byte aligned): for a caller
  // that sums the ranks' partials in fp32 itself.
  void forward_partial_f32(const uint16_t* hidden, const float* router_logits, int64_t tokens, float* out,
                           void* workspace, size_t workspace_size, cudaStream_t stream = nullptr) const;
  // One thread driving every rank of a world (each ShardedMoe on its own GPU): each rank's forward, their
  // collectives in one NCCL group (NCCL requires it of a single thread driving several GPUs), then, with
  // fp32 partials, the rounding of each rank's sum, which must follow the collective. forward() is for
  // one thread (or process) per rank; inside an NCCL group it would round the fp32 sum too early.
  struct RankForward {
    const uint16_t* hidden;
    const float* router_logits;
    uint16_t* out;
    void* workspace;
    size_t workspace_size;
    cudaStream_t stream;
  };
  static void forward_ranks(const std::vector<const ShardedMoe*>& ranks, const std::vector<RankForward>& io,
                            int64_t tokens);
  // The sum of the ranks' bf16 partials in out [T, H] bf16, in place (needs a communicator).
  void all_reduce(uint16_t* out, int64_t tokens, cudaStream_t stream = nullptr) const;

  // Data-parallel tokens (each rank its own T tokens; every rank the same T, padded by the caller, as
  // engines pad to the largest rank's batch): the ranks' hidden and routing all-gathered (rank order),
  // this rank's partial over all world_size x T tokens, and a reduce-scatter that sums the partials and
  // leaves each rank its own tokens' output in out [T, H]. The scheme vLLM uses for expert parallelism;
  // it serves a tensor-parallel shard too. Needs a communicator, world_size x T <= max_tokens and
  // data_parallel_workspace_bytes(). One thread (or process) per rank, as forward(): NCCL collectives with
  // a compute step between them.
  void forward_data_parallel(const uint16_t* hidden, const float* router_logits, int64_t tokens, uint16_t* out,
                             void* workspace, size_t workspace_size, cudaStream_t stream = nullptr) const;
  void forward_data_parallel(const uint16_t* hidden, const int32_t* topk_ids, const float* topk_weights,
                             int64_t tokens, uint16_t* out, void* workspace, size_t workspace_size,
                             cudaStream_t stream = nullptr) const;
  void forward_data_parallel(const uint16_t* hidden, const int64_t* topk_ids, const float* topk_weights,
                             int64_t tokens, uint16_t* out, void* workspace, size_t workspace_size,
                             cudaStream_t stream = nullptr) const;

 private:
  // What a forward is routed by: the logits of the whole layer, or its ids and weights.
  struct Inputs {
    const uint16_t* hidden;
    const float* logits;
    const void* ids;
    bool ids64;
    const float* weights;
    int64_t tokens;
  };
  // Byte offsets of the workspace's parts (sized for max_tokens); `gather` parts only with a communicator,
  // after `total` (forward's bytes), up to data_parallel_total.
  struct Layout {
    size_t runner = 0, local_ids = 0, local_weights = 0, sum_f32 = 0, total = 0, gather_hidden = 0, gather_route = 0,
           gather_weights = 0, gather_partial = 0, data_parallel_total = 0;
  };
  Layout layout() const;
  // The partial into out (bf16) or out_f32, then (reduce, with a communicator) the sum over the ranks.
  // finish: also round the fp32 sum into out (with fp32 partials; after the collective has been issued).
  void run(const Inputs& in, uint16_t* out, float* out_f32, void* workspace, size_t workspace_size,
           cudaStream_t stream, bool reduce, bool finish = true) const;
  // The reference backend's partial (host pointers), its expert-parallel routing done on the host.
  void run_on_host(const Inputs& in, uint16_t* out) const;
  void run_data_parallel(const Inputs& in, uint16_t* out, void* workspace, size_t workspace_size,
                         cudaStream_t stream) const;
  // The checks every forward shares (data_parallel: the workspace of forward_data_parallel); false: nothing
  // to run (T = 0).
  bool check_run(const Inputs& in, const void* out, void* workspace, size_t workspace_size,
                 bool data_parallel = false) const;
  // The fp32 sum (in the workspace) rounded into out.
  void finish_f32(uint16_t* out, int64_t tokens, void* workspace, cudaStream_t stream) const;
  float* sum_f32(void* workspace) const;

  LayerShard shard_;
  std::unique_ptr<MoeRunner> runner_;
  ncclComm_t comm_ = nullptr;
  bool fp32_partials_ = false;
  int device_ = 0;  // the runner's GPU
  std::shared_ptr<int32_t> map_;  // expert-parallel: global_to_local [E] on the device
};

}  // namespace mxmoe
