// Shards of a layer (mxmoe/shard.hpp): resolve a spec, slice a layer in memory, and the byte runs of
// each expert tensor a rank reads from a checkpoint. slice_layer indexes elements and shard_byte_runs
// computes byte offsets, independently, so the tests can hold one against the other.
#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "mxmoe/error.hpp"
#include "mxmoe/formats.hpp"
#include "mxmoe/shard.hpp"

namespace mxmoe {
namespace {

// Part r of n items over w ranks: the first n % w parts one item more (I = 90 blocks over 4: 23 23 22 22).
void split(int n, int w, int r, int& begin, int& count) {
  count = n / w + (r < n % w ? 1 : 0);
  begin = r * (n / w) + std::min(r, n % w);
}

void append_run(std::vector<ByteRun>& runs, uint64_t offset, uint64_t size) {
  if (size == 0) return;
  if (!runs.empty() && runs.back().offset + runs.back().size == offset)
    runs.back().size += size;
  else
    runs.push_back({offset, size});
}

}  // namespace

std::string to_string(ShardMode mode) { return mode == ShardMode::Expert ? "expert" : "tensor"; }

ShardMode parse_shard_mode(const std::string& name) {
  std::string s = name;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (s == "expert" || s == "ep") return ShardMode::Expert;
  if (s == "tensor" || s == "tp") return ShardMode::Tensor;
  detail::throw_error("shard mode '", name, "': expected expert (ep) or tensor (tp)");
}

ShardSpec ShardSpec::tensor(int rank, int world_size) {
  ShardSpec s;
  s.mode = ShardMode::Tensor;
  s.rank = rank;
  s.world_size = world_size;
  return s;
}

ShardSpec ShardSpec::expert(int rank, int world_size) {
  ShardSpec s = tensor(rank, world_size);
  s.mode = ShardMode::Expert;
  return s;
}

LayerShard resolve_shard(const MoeConfig& config, const ShardSpec& spec) {
  config.validate();
  const int E = config.num_experts, blocks = config.intermediate / kMxBlock;
  MXMOE_REQUIRE(spec.world_size >= 1, "ShardSpec.world_size = ", spec.world_size, ": expected >= 1");
  MXMOE_REQUIRE(spec.rank >= 0 && spec.rank < spec.world_size, "ShardSpec.rank = ", spec.rank,
                ": expected in [0, world_size = ", spec.world_size, ")");
  LayerShard s;
  s.spec = spec;
  s.full = config;
  s.local = config;
  s.global_to_local.assign(E, -1);
  if (spec.mode == ShardMode::Tensor) {
    MXMOE_REQUIRE(spec.expert_map.empty(), "ShardSpec.expert_map: only for expert-parallel shards");
    MXMOE_REQUIRE(spec.world_size <= blocks, "ShardSpec.world_size = ", spec.world_size,
                  ": tensor-parallel needs at least one MX block of 32 of the intermediate dimension per rank, and I = ",
                  config.intermediate, " has ", blocks, " blocks");
    split(blocks, spec.world_size, spec.rank, s.block_begin, s.block_count);
    s.local.intermediate = s.block_count * kMxBlock;
    for (int e = 0; e < E; ++e) {
      s.local_experts.push_back(e);
      s.global_to_local[e] = e;
    }
    s.has_w2_bias = spec.rank == 0;
    return s;
  }
  s.block_begin = 0;
  s.block_count = blocks;
  if (spec.expert_map.empty()) {
    MXMOE_REQUIRE(spec.world_size <= E, "ShardSpec.world_size = ", spec.world_size,
                  ": expert-parallel needs at least one expert per rank, and the layer has E = ", E, " experts");
    int begin = 0, count = 0;
    split(E, spec.world_size, spec.rank, begin, count);
    for (int l = 0; l < count; ++l) {
      s.local_experts.push_back(begin + l);
      s.global_to_local[begin + l] = l;
    }
  } else {
    MXMOE_REQUIRE(static_cast<int>(spec.expert_map.size()) == E, "ShardSpec.expert_map: expected E = ", E,
                  " entries (global expert -> local id or -1), got ", spec.expert_map.size());
    int n = 0;
    for (int32_t l : spec.expert_map) n += l >= 0;
    MXMOE_REQUIRE(n >= 1, "ShardSpec.expert_map: rank ", spec.rank, " owns no expert (every rank needs at least one)");
    s.local_experts.assign(n, -1);
    for (int e = 0; e < E; ++e) {
      const int32_t l = spec.expert_map[e];
      MXMOE_REQUIRE(l >= -1 && l < n, "ShardSpec.expert_map[", e, "] = ", l, ": expected -1 or a local id in [0, ", n,
                    ")");
      if (l < 0) continue;
      MXMOE_REQUIRE(s.local_experts[l] < 0, "ShardSpec.expert_map: local id ", l, " is given to experts ",
                    s.local_experts[l], " and ", e);
      s.local_experts[l] = e;
      s.global_to_local[e] = l;
    }
  }
  s.local.num_experts = static_cast<int>(s.local_experts.size());
  // The routing is the whole layer's (top_k of E); a rank's layer sees at most its own experts per token.
  s.local.top_k = std::min(config.top_k, s.local.num_experts);
  return s;
}

MoeLayerData slice_layer(const LayerShard& shard, const MoeLayerData& full) {
  full.view().validate(shard.full);
  const int64_t H = shard.full.hidden, I = shard.full.intermediate, kb1 = H / kMxBlock, kb2 = I / kMxBlock;
  const int64_t i0 = shard.intermediate_begin(), il = shard.local.intermediate, b0 = shard.block_begin,
                bl = shard.block_count;
  MoeLayerData out;
  out.router_weight = full.router_weight;
  out.router_bias = full.router_bias;
  // Element (row r, K block k) of a tensor of kb blocks per row: its 16 code bytes and its scale byte.
  auto take = [](std::vector<uint8_t>& blocks, std::vector<uint8_t>& scales, const std::vector<uint8_t>& from_blocks,
                 const std::vector<uint8_t>& from_scales, int64_t r, int64_t kb, int64_t k0, int64_t kn) {
    const auto b = from_blocks.begin() + (r * kb + k0) * 16;
    blocks.insert(blocks.end(), b, b + kn * 16);
    const auto s = from_scales.begin() + r * kb + k0;
    scales.insert(scales.end(), s, s + kn);
  };
  for (int32_t e : shard.local_experts) {
    // W1 rows 2i, 2i+1 for i in [i0, i0 + il), all K blocks; b1 the same rows.
    for (int64_t row = 2 * i0; row < 2 * (i0 + il); ++row) {
      const int64_t r = e * 2 * I + row;
      take(out.w1_blocks, out.w1_scales, full.w1_blocks, full.w1_scales, r, kb1, 0, kb1);
      if (!full.w1_bias.empty()) out.w1_bias.push_back(full.w1_bias[r]);
    }
    // W2 every row h, K blocks [b0, b0 + bl).
    for (int64_t h = 0; h < H; ++h) {
      const int64_t r = e * H + h;
      take(out.w2_blocks, out.w2_scales, full.w2_blocks, full.w2_scales, r, kb2, b0, bl);
      if (!full.w2_bias.empty() && shard.has_w2_bias) out.w2_bias.push_back(full.w2_bias[r]);
    }
  }
  return out;
}

std::vector<ByteRun> shard_byte_runs(const LayerShard& shard, ShardTensor tensor, int element_bytes) {
  MXMOE_REQUIRE(element_bytes == 1 || element_bytes == 2 || element_bytes == 4, "shard_byte_runs: element_bytes = ",
                element_bytes, ": expected 1, 2 or 4");
  const uint64_t H = shard.full.hidden, I = shard.full.intermediate, kb1 = H / kMxBlock, kb2 = I / kMxBlock;
  const uint64_t i0 = static_cast<uint64_t>(shard.intermediate_begin()), il = shard.local.intermediate;
  const uint64_t b0 = shard.block_begin, bl = shard.block_count, eb = element_bytes;
  std::vector<ByteRun> runs;
  for (int32_t g : shard.local_experts) {
    const uint64_t e = static_cast<uint64_t>(g);
    switch (tensor) {
      // W1 and b1: the rank's rows of an expert are one run (rows 2*i0 .. 2*(i0+il) are consecutive).
      case ShardTensor::W1Blocks: append_run(runs, (e * 2 * I + 2 * i0) * kb1 * 16 * eb, 2 * il * kb1 * 16 * eb); break;
      case ShardTensor::W1Scales: append_run(runs, (e * 2 * I + 2 * i0) * kb1 * eb, 2 * il * kb1 * eb); break;
      case ShardTensor::W1Bias: append_run(runs, (e * 2 * I + 2 * i0) * eb, 2 * il * eb); break;
      // W2: one run per row (its K blocks [b0, b0 + bl)); whole rows merge into one run per expert.
      case ShardTensor::W2Blocks:
      case ShardTensor::W2Scales: {
        const uint64_t per = tensor == ShardTensor::W2Blocks ? 16 * eb : eb;
        for (uint64_t h = 0; h < H; ++h) append_run(runs, ((e * H + h) * kb2 + b0) * per, bl * per);
        break;
      }
      case ShardTensor::W2Bias:
        if (shard.has_w2_bias) append_run(runs, e * H * eb, H * eb);
        break;
    }
  }
  return runs;
}

}  // namespace mxmoe
