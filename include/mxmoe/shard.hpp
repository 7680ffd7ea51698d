#pragma once
// Shards of one MoE layer over several GPUs (issue 45). Expert-parallel: each rank owns a subset of the
// experts (a contiguous range, uneven allowed, or an explicit map from global to local ids) and every
// expert's whole weights. Tensor-parallel: each rank owns a slice of the intermediate dimension I of every
// expert, in whole MX blocks of 32: its gate/up row pairs of W1 (rows 2i, 2i+1 for i in the slice), the
// matching K-columns of W2 with their scale bytes, the matching b1; b2 is added by rank 0 only. With the
// tokens replicated on every rank, the ranks' partial outputs summed are the layer's output.
#include <cstdint>
#include <string>
#include <vector>

#include "mxmoe/config.hpp"
#include "mxmoe/reference.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe {

enum class ShardMode { Expert, Tensor };
std::string to_string(ShardMode mode);
// "expert"/"ep" or "tensor"/"tp" (case-insensitive); anything else is an Error naming the mode.
ShardMode parse_shard_mode(const std::string& name);

struct ShardSpec {
  ShardMode mode = ShardMode::Tensor;
  int rank = 0;
  int world_size = 1;
  // Expert-parallel only, optional: [E] global expert -> this rank's local id, or -1 where another rank
  // owns it. The local ids are 0 .. E_local-1, each once. Empty: contiguous ranges (the first E % W ranks
  // one expert more).
  std::vector<int32_t> expert_map;

  static ShardSpec tensor(int rank, int world_size);
  static ShardSpec expert(int rank, int world_size);
};

// A shard resolved against a layer's config: what this rank owns.
struct LayerShard {
  ShardSpec spec;
  MoeConfig full;   // the whole layer (routing is over its E experts)
  MoeConfig local;  // the rank's layer: TP, intermediate = its slice; EP, num_experts = its experts
  // Tensor-parallel: the MX blocks [block_begin, block_begin + block_count) of I (32 elements each).
  // Expert-parallel: every block (0, I/32).
  int block_begin = 0, block_count = 0;
  std::vector<int32_t> local_experts;    // local id -> global expert (TP: every expert, in order)
  std::vector<int32_t> global_to_local;  // [E] global expert -> local id, or -1 (not on this rank)
  bool has_w2_bias = true;               // TP: rank 0 only; EP: every rank (each expert's b2 is its own)

  int64_t intermediate_begin() const { return int64_t{32} * block_begin; }
};

// Validates the spec against the layer and resolves it. Errors name the constraint: world_size in
// [1, ...], rank in [0, world_size), TP: world_size <= I/32 (every rank at least one MX block), EP:
// world_size <= E (every rank at least one expert), an expert map of E entries whose local ids are
// 0 .. n-1 each once, n >= 1.
LayerShard resolve_shard(const MoeConfig& config, const ShardSpec& spec);

// The rank's part of a whole layer held in memory (the router is copied whole: every rank routes).
MoeLayerData slice_layer(const LayerShard& shard, const MoeLayerData& full);

// The byte runs of one expert tensor (in the checkpoint layout of weights.hpp) that a rank reads,
// relative to the tensor's first byte, in the rank's local expert order, adjacent runs merged. element_bytes: 1 for the
// blocks and scales, 2 (bf16) or 4 (f32) for the biases. The W2 bias of a TP rank other than 0: none.
enum class ShardTensor { W1Blocks, W1Scales, W1Bias, W2Blocks, W2Scales, W2Bias };
struct ByteRun {
  uint64_t offset = 0, size = 0;
  bool operator==(const ByteRun&) const = default;
};
std::vector<ByteRun> shard_byte_runs(const LayerShard& shard, ShardTensor tensor, int element_bytes = 1);

// The rank's partial output in fp64 (the oracle of the sharded forward): hidden [T, H] bf16, the whole
// layer's router logits [T, E] fp32, the rank's weights (slice_layer or Checkpoint::load_layer_shard).
// EP: each token's pairs whose expert is on this rank, weighted, b2 included; a token without one gets
// 0. TP: the whole routing over the rank's slice of I, b2 from rank 0 only. Summed over the ranks: the
// layer's reference_moe_f64 (up to fp64 rounding).
void reference_shard_f64(const LayerShard& shard, const MoeWeights& weights, std::span<const uint16_t> hidden,
                         std::span<const float> logits, int64_t tokens, std::span<double> out,
                         const ReferenceOptions& options = {});

}  // namespace mxmoe
