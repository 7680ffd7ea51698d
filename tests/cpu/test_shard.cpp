// Shards of a layer (mxmoe/shard.hpp): the splits and their errors, the bytes each rank reads from a
// checkpoint in both modes and both namings (against slicing the whole layer in memory), and the sum
// over the ranks of the fp64 reference of each shard against the whole layer's reference.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "mxmoe/checkpoint.hpp"
#include "mxmoe/formats.hpp"
#include "mxmoe/reference.hpp"
#include "mxmoe/runner.hpp"
#include "mxmoe/shard.hpp"
#include "mxmoe/sharded_moe.hpp"
#include "reference/routed_reference.hpp"
#include "test_support.hpp"

namespace mxmoe {
namespace {

namespace fs = std::filesystem;
using test::expect_error_naming;
using test::make_config;

class ShardTest : public testing::Test {
 protected:
  ShardTest() {
    static int counter = 0;
    dir_ = fs::temp_directory_path() / ("mxmoe_test_shard_" + std::to_string(seed_) + "_" + std::to_string(++counter));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~ShardTest() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void SetUp() override { RecordProperty("seed", std::to_string(seed_)); }
  void TearDown() override {
    if (HasFailure()) std::cerr << "[ seed ] ShardTest MXMOE_TEST_SEED=" << seed_ << "\n";
  }

  // Odd sizes: I = 160 is 5 MX blocks (uneven over 2, 3 and 4 ranks), E = 7 experts.
  static MoeConfig odd_config() { return make_config(7, 3, 96, 160); }

  std::vector<uint16_t> random_hidden(int64_t tokens, int hidden) {
    std::normal_distribution<float> n(0.f, 1.f);
    std::vector<uint16_t> v(static_cast<size_t>(tokens * hidden));
    for (auto& x : v) x = float_to_bf16(n(rng_));
    return v;
  }
  std::vector<float> random_logits(int64_t tokens, int experts) {
    std::normal_distribution<float> n(0.f, 2.f);
    std::vector<float> v(static_cast<size_t>(tokens * experts));
    for (auto& x : v) x = n(rng_);
    return v;
  }
  // A random permutation of the experts dealt to `world` ranks (every rank at least `least`): the maps.
  std::vector<ShardSpec> random_expert_maps(int experts, int world, int least = 1) {
    std::vector<int> order(experts), owner(experts);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng_);
    std::uniform_int_distribution<int> pick(0, world - 1);
    for (int i = 0; i < experts; ++i) owner[order[i]] = i < world * least ? i % world : pick(rng_);
    std::vector<ShardSpec> specs;
    for (int r = 0; r < world; ++r) {
      ShardSpec s = ShardSpec::expert(r, world);
      s.expert_map.assign(experts, -1);
      int next = 0;
      for (int i = 0; i < experts; ++i)
        if (owner[order[i]] == r) s.expert_map[order[i]] = next++;
      specs.push_back(s);
    }
    return specs;
  }
  // Every split the partial tests walk: tensor- and expert-parallel ranges at world sizes 2 to 4, and
  // expert-parallel by a random map (every rank at least `least` experts); each with its label.
  struct Split {
    std::string label;
    std::vector<ShardSpec> specs;
  };
  std::vector<Split> splits(int experts, int least = 1) {
    std::vector<Split> out;
    for (int world = 2; world <= 4; ++world) {
      const std::string w = " world " + std::to_string(world);
      out.push_back({"tensor" + w, specs(ShardMode::Tensor, world)});
      out.push_back({"expert" + w, specs(ShardMode::Expert, world)});
      out.push_back({"expert" + w + " mapped", random_expert_maps(experts, world, least)});
    }
    return out;
  }
  std::vector<ShardSpec> specs(ShardMode mode, int world) {
    std::vector<ShardSpec> out;
    for (int r = 0; r < world; ++r) out.push_back(mode == ShardMode::Tensor ? ShardSpec::tensor(r, world)
                                                                             : ShardSpec::expert(r, world));
    return out;
  }

  uint64_t seed_ = test::fresh_seed();
  std::mt19937_64 rng_{seed_};
  fs::path dir_;
};

TEST_F(ShardTest, TensorParallelSplitsWholeMxBlocksUnevenly) {
  const MoeConfig c = MoeConfig::gpt_oss_120b();  // I = 2880: 90 blocks
  const int expect_count[4] = {23, 23, 22, 22}, expect_begin[4] = {0, 23, 46, 68};
  for (int r = 0; r < 4; ++r) {
    const LayerShard s = resolve_shard(c, ShardSpec::tensor(r, 4));
    EXPECT_EQ(s.block_count, expect_count[r]);
    EXPECT_EQ(s.block_begin, expect_begin[r]);
    EXPECT_EQ(s.local.intermediate, 32 * expect_count[r]);
    EXPECT_EQ(s.local.num_experts, 128);
    EXPECT_EQ(s.has_w2_bias, r == 0);
    EXPECT_NO_THROW(s.local.validate());
  }
  expect_error_naming([&] { resolve_shard(make_config(4, 2, 64, 96), ShardSpec::tensor(0, 4)); }, "MX block");
  expect_error_naming([&] { resolve_shard(c, ShardSpec::tensor(4, 4)); }, "rank");
  expect_error_naming([&] { resolve_shard(c, ShardSpec::tensor(0, 0)); }, "world_size");
}

TEST_F(ShardTest, ExpertParallelSplitsRangesOrAMap) {
  const MoeConfig c = MoeConfig::gpt_oss_120b();
  int next = 0;
  for (int r = 0; r < 3; ++r) {  // 128 over 3: 43, 43, 42
    const LayerShard s = resolve_shard(c, ShardSpec::expert(r, 3));
    ASSERT_EQ(s.local.num_experts, r < 2 ? 43 : 42);
    for (int l = 0; l < s.local.num_experts; ++l) {
      EXPECT_EQ(s.local_experts[l], next + l);
      EXPECT_EQ(s.global_to_local[next + l], l);
    }
    next += s.local.num_experts;
    EXPECT_TRUE(s.has_w2_bias);
    EXPECT_EQ(s.local.intermediate, c.intermediate);
  }
  EXPECT_EQ(next, 128);
  expect_error_naming([&] { resolve_shard(make_config(3, 2, 64, 64), ShardSpec::expert(0, 4)); }, "one expert per rank");
  ShardSpec bad = ShardSpec::expert(0, 2);
  bad.expert_map = {0, -1, 0, 1};
  expect_error_naming([&] { resolve_shard(make_config(4, 2, 64, 64), bad); }, "local id 0");
  bad.expert_map = {-1, -1, -1, -1};
  expect_error_naming([&] { resolve_shard(make_config(4, 2, 64, 64), bad); }, "owns no expert");
  bad.expert_map = {0, 1};
  expect_error_naming([&] { resolve_shard(make_config(4, 2, 64, 64), bad); }, "expert_map");
  bad.expert_map = {0, 2, -1, -1};
  expect_error_naming([&] { resolve_shard(make_config(4, 2, 64, 64), bad); }, "expert_map[1]");
  ShardSpec tp = ShardSpec::tensor(0, 2);
  tp.expert_map = {0, 1, 2, 3};
  expect_error_naming([&] { resolve_shard(make_config(4, 2, 64, 64), tp); }, "expert_map");
  EXPECT_EQ(parse_shard_mode("TP"), ShardMode::Tensor);
  EXPECT_EQ(parse_shard_mode("expert"), ShardMode::Expert);
  expect_error_naming([] { parse_shard_mode("pipeline"); }, "pipeline");
}

// Over the ranks, the runs of every tensor cover its bytes exactly once (TP's b2: rank 0 alone).
TEST_F(ShardTest, ByteRunsOfTheRanksPartitionEachTensor) {
  const MoeConfig c = odd_config();
  const uint64_t E = c.num_experts, H = c.hidden, I = c.intermediate;
  const std::map<ShardTensor, uint64_t> bytes = {
      {ShardTensor::W1Blocks, E * 2 * I * H / 2}, {ShardTensor::W1Scales, E * 2 * I * H / 32},
      {ShardTensor::W1Bias, E * 2 * I * 2},       {ShardTensor::W2Blocks, E * H * I / 2},
      {ShardTensor::W2Scales, E * H * I / 32},     {ShardTensor::W2Bias, E * H * 2}};
  for (ShardMode mode : {ShardMode::Tensor, ShardMode::Expert})
    for (int world = 1; world <= 4; ++world)
      for (bool mapped : {false, true}) {
        if (mapped && mode == ShardMode::Tensor) continue;
        SCOPED_TRACE(to_string(mode) + " world " + std::to_string(world) + (mapped ? " mapped" : ""));
        const auto all = mapped ? random_expert_maps(c.num_experts, world) : specs(mode, world);
        for (const auto& [tensor, size] : bytes) {
          std::vector<int> covered(size, 0);
          for (const ShardSpec& spec : all) {
            const auto runs = shard_byte_runs(resolve_shard(c, spec), tensor, tensor == ShardTensor::W1Bias ||
                                                                                      tensor == ShardTensor::W2Bias
                                                                                  ? 2
                                                                                  : 1);
            for (const ByteRun& r : runs) {
              ASSERT_LE(r.offset + r.size, size);
              for (uint64_t b = r.offset; b < r.offset + r.size; ++b) ++covered[b];
            }
          }
          const bool once = std::all_of(covered.begin(), covered.end(), [](int n) { return n == 1; });
          EXPECT_TRUE(once) << "tensor " << static_cast<int>(tensor);
        }
      }
  // A contiguous EP range reads one run per tensor; TP's W1 one run per expert.
  const LayerShard ep = resolve_shard(c, ShardSpec::expert(1, 3));
  EXPECT_EQ(shard_byte_runs(ep, ShardTensor::W2Blocks).size(), 1u);
  const LayerShard tp = resolve_shard(c, ShardSpec::tensor(1, 3));
  EXPECT_EQ(shard_byte_runs(tp, ShardTensor::W1Blocks).size(), E);
  EXPECT_EQ(shard_byte_runs(tp, ShardTensor::W2Scales).size(), E * H);
  EXPECT_TRUE(shard_byte_runs(tp, ShardTensor::W2Bias, 2).empty());
}

// What a rank reads from the checkpoint is what slicing the whole layer gives, for both modes and namings.
TEST_F(ShardTest, CheckpointShardEqualsSliceOfTheLayer) {
  CheckpointConfig config;
  config.moe = odd_config();
  config.num_layers = 2;
  config.quant_method = "mxfp4";
  for (TensorNaming naming : {TensorNaming::Original, TensorNaming::HuggingFace})
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(to_string(naming) + (with_bias ? " with bias" : " without bias"));
      const fs::path dir = dir_ / (to_string(naming) + (with_bias ? "_b" : "_nb"));
      std::vector<MoeLayerData> layers;
      for (int n = 0; n < 2; ++n) layers.push_back(MoeLayerData::random(config.moe, seed_ + n, with_bias));
      write_checkpoint(dir, config, layers, naming);
      const Checkpoint ckpt(dir);
      ASSERT_EQ(ckpt.naming(), naming);
      const MoeLayerData whole = ckpt.load_layer(1);
      for (ShardMode mode : {ShardMode::Tensor, ShardMode::Expert})
        for (int world = 1; world <= 4; ++world)
          for (bool mapped : {false, true}) {
            if (mapped && mode == ShardMode::Tensor) continue;
            const auto all = mapped ? random_expert_maps(config.moe.num_experts, world) : specs(mode, world);
            for (const ShardSpec& spec : all) {
              SCOPED_TRACE(to_string(mode) + " rank " + std::to_string(spec.rank) + "/" + std::to_string(world));
              const LayerShard shard = resolve_shard(config.moe, spec);
              const MoeLayerData read = ckpt.load_layer_shard(1, spec);
              const MoeLayerData sliced = slice_layer(shard, whole);
              EXPECT_EQ(read.w1_blocks, sliced.w1_blocks);
              EXPECT_EQ(read.w1_scales, sliced.w1_scales);
              EXPECT_EQ(read.w1_bias, sliced.w1_bias);
              EXPECT_EQ(read.w2_blocks, sliced.w2_blocks);
              EXPECT_EQ(read.w2_scales, sliced.w2_scales);
              EXPECT_EQ(read.w2_bias, sliced.w2_bias);
              EXPECT_EQ(read.router_weight, whole.router_weight);
              EXPECT_NO_THROW(read.view().validate(shard.local));
              EXPECT_EQ(read.w2_bias.empty(), !with_bias || !shard.has_w2_bias);
            }
          }
    }
}

// read_runs reads exactly the runs asked for, concatenated, and refuses a run outside the tensor.
TEST_F(ShardTest, ReadRunsReadsTheRunsAndChecksThem) {
  std::uniform_int_distribution<int> byte(0, 255);
  TensorData t{"U8", {7, 19}, std::vector<uint8_t>(133)};
  for (auto& b : t.bytes) b = static_cast<uint8_t>(byte(rng_));
  const fs::path path = dir_ / "runs.safetensors";
  write_safetensors(path, {{"other", TensorData{"U8", {3}, {1, 2, 3}}}, {"t", t}});
  const SafetensorsFile file(path);
  const std::vector<ByteRun> runs = {{0, 4}, {19, 19}, {132, 1}, {60, 0}};
  std::vector<uint8_t> expect;
  for (const ByteRun& r : runs) expect.insert(expect.end(), t.bytes.begin() + r.offset, t.bytes.begin() + r.offset + r.size);
  EXPECT_EQ(file.read_runs("t", runs), expect);
  EXPECT_TRUE(file.read_runs("t", {}).empty());
  expect_error_naming([&] { file.read_runs("t", {{130, 4}}); }, "outside");
  expect_error_naming([&] { file.read_runs("t", {{~uint64_t{0}, 2}}); }, "outside");
}

// Slicing by hand: TP rank r's W1 row j of expert e is the layer's row 2*i0 + j, its W2 block k of row h
// the layer's block b0 + k (independent of slice_layer's loops).
TEST_F(ShardTest, TensorSliceHoldsTheInterleavedRowPairsAndColumnBlocks) {
  const MoeConfig c = odd_config();
  const MoeLayerData whole = MoeLayerData::random(c, seed_);
  const LayerShard s = resolve_shard(c, ShardSpec::tensor(2, 3));  // 5 blocks over 3: rank 2 has block 4
  ASSERT_EQ(s.block_begin, 4);
  ASSERT_EQ(s.block_count, 1);
  const MoeLayerData part = slice_layer(s, whole);
  const int64_t H = c.hidden, I = c.intermediate, e = 5, row_bytes = H / 2;
  for (int64_t j = 0; j < 64; ++j)
    for (int64_t b = 0; b < row_bytes; ++b)
      ASSERT_EQ(part.w1_blocks[(e * 64 + j) * row_bytes + b], whole.w1_blocks[(e * 2 * I + 128 * 2 + j) * row_bytes + b]);
  for (int64_t h = 0; h < H; ++h) {
    ASSERT_EQ(part.w2_scales[e * H + h], whole.w2_scales[(e * H + h) * (I / 32) + 4]);
    for (int b = 0; b < 16; ++b)
      ASSERT_EQ(part.w2_blocks[(e * H + h) * 16 + b], whole.w2_blocks[((e * H + h) * (I / 32) + 4) * 16 + b]);
  }
  EXPECT_EQ(part.w1_bias[e * 64 + 3], whole.w1_bias[e * 2 * I + 256 + 3]);
  EXPECT_TRUE(part.w2_bias.empty());
}

// The ranks' fp64 partial outputs summed equal the whole layer's fp64 reference.
TEST_F(ShardTest, PartialReferencesSumToTheLayer) {
  for (const MoeConfig& c : {odd_config(), make_config(8, 2, 64, 128)}) {
    const MoeLayerData whole = MoeLayerData::random(c, seed_);
    for (int64_t tokens : {0, 1, 3, 37}) {
      const auto hidden = random_hidden(tokens, c.hidden);
      const auto logits = random_logits(tokens, c.num_experts);
      std::vector<double> expect(static_cast<size_t>(tokens * c.hidden));
      reference_moe_f64(c, whole.view(), hidden, logits, tokens, expect);
      double norm = 0;
      for (double v : expect) norm = std::max(norm, std::abs(v));
      for (const Split& split : splits(c.num_experts)) {
        SCOPED_TRACE(split.label + " T " + std::to_string(tokens));
        std::vector<double> sum(expect.size(), 0.0), part(expect.size());
        for (const ShardSpec& spec : split.specs) {
          const LayerShard shard = resolve_shard(c, spec);
          const MoeLayerData data = slice_layer(shard, whole);
          std::fill(part.begin(), part.end(), std::nan(""));
          reference_shard_f64(shard, data.view(), hidden, logits, tokens, part);
          for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
        }
        for (size_t i = 0; i < sum.size(); ++i)
          ASSERT_NEAR(sum[i], expect[i], 1e-9 * std::max(norm, 1.0)) << "element " << i;
      }
    }
  }
}

// Expert-parallel, T = 1: the ranks that own none of the token's experts give an exact 0 row; b2 is in
// the owning rank's partial (each expert's b2 is inside its weighted output).
TEST_F(ShardTest, ExpertRankWithoutTheTokensExpertsGivesZero) {
  const MoeConfig c = make_config(8, 2, 64, 64);
  const MoeLayerData whole = MoeLayerData::random(c, seed_);
  const auto hidden = random_hidden(1, c.hidden);
  std::vector<float> logits(8, -5.f);
  logits[1] = 3.f;  // the token's two experts, 1 and 2, both on rank 0 of 4 (experts 0, 1) and 1 (2, 3)
  logits[2] = 2.f;
  std::vector<double> part(c.hidden);
  for (int r = 0; r < 4; ++r) {
    const LayerShard shard = resolve_shard(c, ShardSpec::expert(r, 4));
    std::fill(part.begin(), part.end(), std::nan(""));
    reference_shard_f64(shard, slice_layer(shard, whole).view(), hidden, logits, 1, part);
    const bool zero = std::all_of(part.begin(), part.end(), [](double v) { return v == 0.0; });
    EXPECT_EQ(zero, r >= 2) << "rank " << r;
  }
}

// ShardedMoe on the reference backend (host pointers): each rank's partial, routed by the logits or by
// the engine's ids (with dropped pairs, -1), is its fp64 partial reference rounded once; the partials
// sum to the layer. Tensor- and expert-parallel (ranges and maps), uneven worlds, T = 0, 1, 3, 37.
TEST_F(ShardTest, ShardedMoeOnTheReferenceBackendGivesEachRanksPartial) {
  const MoeConfig c = make_config(9, 2, 96, 160);  // I = 5 MX blocks, E = 9: uneven over 2, 3 and 4 ranks
  const MoeLayerData whole = MoeLayerData::random(c, seed_);
  for (int64_t tokens : {0, 1, 3, 37}) {
    const auto hidden = random_hidden(tokens, c.hidden);
    const auto logits = random_logits(tokens, c.num_experts);
    std::vector<int32_t> ids(static_cast<size_t>(tokens * c.top_k));
    std::vector<float> weights(ids.size());
    reference_route(c, logits, tokens, ids, weights);
    std::vector<double> layer(static_cast<size_t>(tokens * c.hidden));
    reference_moe_f64(c, whole.view(), hidden, logits, tokens, layer);
    for (const Split& split : splits(c.num_experts, c.top_k)) {
      SCOPED_TRACE(split.label + " T " + std::to_string(tokens));
      std::vector<double> sum(layer.size(), 0.0), part(layer.size());
      for (const ShardSpec& spec : split.specs) {
        const LayerShard shard = resolve_shard(c, spec);
        const MoeLayerData data = slice_layer(shard, whole);
        const ShardedMoe moe(shard, data.view(), test::reference_options(64));
        EXPECT_EQ(moe.workspace_bytes(), 0u);
        EXPECT_EQ(moe.data_parallel_workspace_bytes(), 0u);
        std::vector<uint16_t> got(layer.size(), 0x7FC1), routed(layer.size(), 0x7FC1);
        moe.forward_partial(hidden.data(), logits.data(), tokens, got.data(), nullptr, 0);
        moe.forward_routed(hidden.data(), ids.data(), weights.data(), tokens, routed.data(), nullptr, 0);
        EXPECT_EQ(routed, got) << "rank " << spec.rank << ": the routed partial differs from the logits one";
        reference_shard_f64(shard, data.view(), hidden, logits, tokens, part);
        for (size_t i = 0; i < got.size(); ++i) {
          // One bf16 rounding of the same fp64 value, up to fp64 summation order: within 1 bf16 ulp.
          ASSERT_NEAR(bf16_to_float(got[i]), part[i], std::abs(part[i]) / 128 + 1e-30)
              << "rank " << spec.rank << ", element " << i;
          sum[i] += bf16_to_float(got[i]);
        }
      }
      double norm = 0;
      for (double v : layer) norm = std::max(norm, std::abs(v));
      const double world = static_cast<double>(split.specs.size());
      for (size_t i = 0; i < sum.size(); ++i)
        ASSERT_NEAR(sum[i], layer[i], world * norm / 128 + 1e-30) << "element " << i;
    }
  }
}

// The engine's ids through an expert-parallel shard: -1 (already dropped by the engine) stays dropped,
// and an id outside [0, E) is an Error naming topk_ids.
TEST_F(ShardTest, ShardedMoeTakesTheEnginesDroppedPairs) {
  const MoeConfig c = make_config(8, 2, 64, 64);
  const MoeLayerData whole = MoeLayerData::random(c, seed_);
  const LayerShard shard = resolve_shard(c, ShardSpec::expert(1, 2));  // experts 4 .. 7
  const ShardedMoe moe(shard, slice_layer(shard, whole).view(), test::reference_options(4));
  const auto hidden = random_hidden(2, c.hidden);
  // Token 0: experts 5 and 1 (1 on rank 0); token 1: 6 and dropped by the engine.
  const std::vector<int32_t> ids = {5, 1, 6, kDroppedPairId};
  const std::vector<float> weights = {0.7f, 0.3f, 1.f, 0.5f};
  std::vector<uint16_t> got(2 * c.hidden), want(2 * c.hidden);
  moe.forward_routed(hidden.data(), ids.data(), weights.data(), 2, got.data(), nullptr, 0);
  const MoeRunner local(shard.local, slice_layer(shard, whole).view(), test::reference_options(4));
  const std::vector<int32_t> local_ids = {1, kDroppedPairId, 2, kDroppedPairId};
  local.forward_routed(hidden.data(), local_ids.data(), weights.data(), 2, want.data(), nullptr, 0);
  EXPECT_EQ(got, want);
  const std::vector<int32_t> bad = {5, 8, 6, 7};
  expect_error_naming([&] { moe.forward_routed(hidden.data(), bad.data(), weights.data(), 2, got.data(), nullptr, 0); },
                      "topk_ids[0, 1] = 8");
}

// What a shard refuses, naming it: whole-layer weights, too few experts on an expert-parallel rank for
// k, fp32 partials and too many tokens.
TEST_F(ShardTest, ShardedMoeErrorsNameTheArgument) {
  const MoeConfig c = make_config(9, 2, 64, 64);
  const MoeLayerData whole = MoeLayerData::random(c, seed_);
  const RunnerOptions options = test::reference_options(4);
  const LayerShard tp = resolve_shard(c, ShardSpec::tensor(0, 2));
  expect_error_naming([&] { ShardedMoe(tp, whole.view(), options); }, "MoeWeights");
  const LayerShard ep = resolve_shard(c, ShardSpec::expert(4, 5));  // 9 experts over 5 ranks: rank 4 has 1
  expect_error_naming([&] { ShardedMoe(ep, slice_layer(ep, whole).view(), options); }, "world_size <= E / k");
  RunnerOptions fp8 = options;
  fp8.precision = Precision::Fp8;
  expect_error_naming([&] { ShardedMoe(tp, slice_layer(tp, whole).view(), fp8); }, "precision");
  const ShardedMoe moe(tp, slice_layer(tp, whole).view(), options);
  const auto hidden = random_hidden(5, c.hidden);
  const auto logits = random_logits(5, c.num_experts);
  std::vector<float> f32(5 * c.hidden);
  std::vector<uint16_t> out(5 * c.hidden);
  expect_error_naming([&] { moe.forward_partial_f32(hidden.data(), logits.data(), 1, f32.data(), nullptr, 0); },
                      "GPU backend");
  expect_error_naming([&] { moe.forward_partial(hidden.data(), logits.data(), 5, out.data(), nullptr, 0); },
                      "max_tokens = 4");
  expect_error_naming([&] { moe.forward_data_parallel(hidden.data(), logits.data(), 1, out.data(), nullptr, 0); },
                      "no communicator");
}

}  // namespace
}  // namespace mxmoe
