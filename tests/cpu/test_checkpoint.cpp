// Checkpoint reading and writing: bit-exact round trips in both tensor namings, config.json in both
// key sets, and one test per kind of corrupt file, each checking the words of its own error.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <iostream>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "mxmoe/checkpoint.hpp"
#include "mxmoe/error.hpp"
#include "mxmoe/formats.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace mxmoe {
namespace {

// Runs f, expecting an mxmoe::Error whose message contains every one of `words`.
void expect_error(const std::function<void()>& f, std::initializer_list<std::string_view> words) {
  try {
    f();
  } catch (const Error& e) {
    const std::string message = e.what();
    for (std::string_view w : words)
      EXPECT_NE(message.find(w), std::string::npos) << "error message: " << message << "\nlacks: " << w;
    return;
  }
  std::string all;
  for (std::string_view w : words) all += " '" + std::string(w) + "'";
  ADD_FAILURE() << "expected mxmoe::Error containing" << all << ", nothing was thrown";
}

std::vector<uint8_t> file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// A safetensors file from a header text, a (possibly lying) header length, and a data section.
void write_raw_safetensors(const fs::path& path, const std::string& header, const std::vector<uint8_t>& data,
                           uint64_t header_length) {
  std::vector<uint8_t> bytes(8);
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(header_length >> (8 * i));
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.insert(bytes.end(), data.begin(), data.end());
  write_bytes(path, bytes);
}
void write_raw_safetensors(const fs::path& path, const std::string& header, const std::vector<uint8_t>& data) {
  write_raw_safetensors(path, header, data, header.size());
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

class CheckpointTest : public testing::Test {
 protected:
  CheckpointTest() {
    static int counter = 0;
    dir_ = fs::temp_directory_path() /
           ("mxmoe_test_checkpoint_" + std::to_string(seed_) + "_" + std::to_string(++counter));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~CheckpointTest() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << "[ seed ] CheckpointTest random seed = " << seed_ << "\n";
  }

  // Random bytes, never all zero (an all-zero tensor would hide a reader that returns zeros).
  std::vector<uint8_t> random_bytes(size_t n) {
    std::uniform_int_distribution<int> byte(0, 255);
    std::vector<uint8_t> v(n);
    for (auto& b : v) b = static_cast<uint8_t>(byte(rng_));
    if (n > 0) v[n / 2] |= 1;
    return v;
  }
  std::vector<uint16_t> random_u16(size_t n) {
    std::uniform_int_distribution<int> half(0, 0xFFFF);
    std::vector<uint16_t> v(n);
    for (auto& h : v) h = static_cast<uint16_t>(half(rng_));
    if (n > 0) v[n / 2] |= 1;
    return v;
  }

  // E=4, H=I=64, top_k 2, 2 layers: small enough for a unit test, every dimension distinct in role.
  static CheckpointConfig small_config() {
    CheckpointConfig config;
    config.moe.name = "checkpoint";
    config.moe.num_experts = 4;
    config.moe.top_k = 2;
    config.moe.hidden = 64;
    config.moe.intermediate = 64;
    config.moe.swiglu_limit = 7.0f;
    config.num_layers = 2;
    config.quant_method = "mxfp4";
    return config;
  }

  MoeLayerData random_layer(const MoeConfig& c, bool with_bias = true) {
    const size_t E = c.num_experts, H = c.hidden, I = c.intermediate;
    MoeLayerData d;
    d.w1_blocks = random_bytes(E * 2 * I * H / 2);
    d.w1_scales = random_bytes(E * 2 * I * H / 32);
    d.w2_blocks = random_bytes(E * H * I / 2);
    d.w2_scales = random_bytes(E * H * I / 32);
    if (with_bias) {
      d.w1_bias = random_u16(E * 2 * I);
      d.w2_bias = random_u16(E * H);
      d.router_weight = random_u16(E * H);
      d.router_bias = random_u16(E);
    }
    return d;
  }

  std::vector<MoeLayerData> random_layers(const CheckpointConfig& config) {
    std::vector<MoeLayerData> layers;
    for (int n = 0; n < config.num_layers; ++n) layers.push_back(random_layer(config.moe));
    return layers;
  }

  fs::path ckpt_dir() const { return dir_ / "ckpt"; }

  // Writes a valid checkpoint, then lets `edit` change the tensors of model.safetensors.
  void write_edited_checkpoint(TensorNaming naming,
                               const std::function<void(std::map<std::string, TensorData>&)>& edit) {
    const auto config = small_config();
    write_checkpoint(ckpt_dir(), config, random_layers(config), naming);
    const fs::path model = ckpt_dir() / "model.safetensors";
    std::map<std::string, TensorData> tensors;
    std::map<std::string, std::string> metadata;
    {
      SafetensorsFile file(model);
      for (const auto& [name, info] : file.tensors())
        tensors[name] = TensorData{info.dtype, info.shape, file.read(name)};
      metadata = file.metadata();
    }
    edit(tensors);
    write_safetensors(model, tensors, metadata);
  }

  // A small valid safetensors file with a U8 tensor "a" [2, 4] and a BF16 tensor "b" [3].
  fs::path write_small_file(const std::string& name = "small.safetensors") {
    std::map<std::string, TensorData> tensors;
    tensors["a"] = TensorData{"U8", {2, 4}, random_bytes(8)};
    tensors["b"] = TensorData{"BF16", {3}, random_bytes(6)};
    const fs::path path = dir_ / name;
    write_safetensors(path, tensors, {{"format", "pt"}});
    return path;
  }

  fs::path raw_file(const std::string& header, const std::vector<uint8_t>& data) {
    const fs::path path = dir_ / "raw.safetensors";
    write_raw_safetensors(path, header, data);
    return path;
  }

  const uint32_t seed_ = std::random_device{}();
  std::mt19937 rng_{seed_};
  fs::path dir_;
};

void expect_layer_equal(const MoeLayerData& got, const MoeLayerData& want, int layer) {
  SCOPED_TRACE("layer " + std::to_string(layer));
  EXPECT_EQ(got.w1_blocks, want.w1_blocks);
  EXPECT_EQ(got.w1_scales, want.w1_scales);
  EXPECT_EQ(got.w1_bias, want.w1_bias);
  EXPECT_EQ(got.w2_blocks, want.w2_blocks);
  EXPECT_EQ(got.w2_scales, want.w2_scales);
  EXPECT_EQ(got.w2_bias, want.w2_bias);
  EXPECT_EQ(got.router_weight, want.router_weight);
  EXPECT_EQ(got.router_bias, want.router_bias);
}

// --- safetensors -------------------------------------------------------------------------------

TEST_F(CheckpointTest, SafetensorsRoundTrip) {
  std::map<std::string, TensorData> tensors;
  tensors["u8"] = TensorData{"U8", {3, 5}, random_bytes(15)};  // odd size: the next start must realign
  tensors["bf16"] = TensorData{"BF16", {7}, random_bytes(14)};
  tensors["f32"] = TensorData{"F32", {2, 3}, random_bytes(24)};
  tensors["i64"] = TensorData{"I64", {1}, random_bytes(8)};
  tensors["empty"] = TensorData{"F32", {0, 4}, {}};
  tensors["scalar"] = TensorData{"U16", {}, random_bytes(2)};
  const std::map<std::string, std::string> metadata{{"format", "pt"}, {"note", "round trip"}};
  const fs::path path = dir_ / "t.safetensors";
  write_safetensors(path, tensors, metadata);

  const auto bytes = file_bytes(path);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i) header_length = (header_length << 8) | bytes[i];
  EXPECT_EQ((8 + header_length) % 8, 0u) << "header must be padded so the data starts 8-byte aligned";

  SafetensorsFile file(path);
  EXPECT_EQ(file.path(), path);
  EXPECT_EQ(file.metadata(), metadata);
  ASSERT_EQ(file.tensors().size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(file.contains(name));
    const TensorInfo& info = file.info(name);
    EXPECT_EQ(info.dtype, t.dtype);
    EXPECT_EQ(info.shape, t.shape);
    EXPECT_EQ(info.begin % 8, 0u);
    EXPECT_EQ(info.end - info.begin, t.bytes.size());
    EXPECT_EQ(file.read(name), t.bytes);
  }
  EXPECT_FALSE(file.contains("missing"));
  expect_error([&] { file.read("missing"); }, {"no tensor named 'missing'", path.string()});

  // Deterministic: the same tensors give the same file.
  write_safetensors(dir_ / "t2.safetensors", tensors, metadata);
  EXPECT_EQ(file_bytes(dir_ / "t2.safetensors"), bytes);
}

TEST_F(CheckpointTest, SafetensorsWriterRejectsBadTensors) {
  const fs::path path = dir_ / "w.safetensors";
  expect_error([&] { write_safetensors(path, {{"x", TensorData{"U8", {4}, random_bytes(5)}}}); },
               {"'x'", "5 bytes do not match shape [4]"});
  expect_error([&] { write_safetensors(path, {{"x", TensorData{"Q4", {4}, random_bytes(4)}}}); },
               {"'x'", "unknown dtype 'Q4'"});
  expect_error([&] { write_safetensors(path, {{"x", TensorData{"U8", {-1}, {}}}}); }, {"'x'", "invalid shape"});
  expect_error([&] { write_safetensors(path, {{"__metadata__", TensorData{"U8", {1}, random_bytes(1)}}}); },
               {"reserved"});
}

TEST_F(CheckpointTest, TruncatedFile) {
  const fs::path good = write_small_file();
  const auto bytes = file_bytes(good);
  uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i) header_length = (header_length << 8) | bytes[i];
  const size_t data_begin = 8 + header_length;
  ASSERT_GT(bytes.size(), data_begin);

  struct Cut {
    size_t size;
    const char* words;
  };
  const std::vector<Cut> cuts{
      {0, "shorter than the 8-byte header length"},
      {3, "shorter than the 8-byte header length"},
      {7, "shorter than the 8-byte header length"},
      {8, "runs past the end of the file"},
      {8 + header_length / 2, "runs past the end of the file"},
      {data_begin - 1, "runs past the end of the file"},
      {data_begin, "past the end of the data section"},
      {data_begin + 3, "past the end of the data section"},
      {bytes.size() - 1, "past the end of the data section"},
  };
  const fs::path cut_path = dir_ / "cut.safetensors";
  for (const Cut& cut : cuts) {
    SCOPED_TRACE("cut at " + std::to_string(cut.size) + " of " + std::to_string(bytes.size()) + " bytes");
    write_bytes(cut_path, std::vector<uint8_t>(bytes.begin(), bytes.begin() + cut.size));
    expect_error([&] { SafetensorsFile file(cut_path); }, {cut.words, cut_path.string()});
  }
  EXPECT_NO_THROW(SafetensorsFile file(good));
}

TEST_F(CheckpointTest, HeaderLengthPastEnd) {
  const std::string header = R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})";
  const auto data = random_bytes(4);
  const fs::path path = dir_ / "h.safetensors";
  write_raw_safetensors(path, header, data, header.size() + data.size() + 1);
  expect_error([&] { SafetensorsFile file(path); }, {"header length", "runs past the end of the file"});
}

TEST_F(CheckpointTest, HeaderLengthHugeOrZero) {
  const std::string header = R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})";
  const fs::path path = dir_ / "h.safetensors";
  for (uint64_t length : {uint64_t{1} << 40, std::numeric_limits<uint64_t>::max(), uint64_t{200} << 20}) {
    SCOPED_TRACE(length);
    write_raw_safetensors(path, header, random_bytes(4), length);
    expect_error([&] { SafetensorsFile file(path); }, {"absurdly large", std::to_string(length)});
  }
  write_raw_safetensors(path, header, random_bytes(4), 0);
  expect_error([&] { SafetensorsFile file(path); }, {"header length is 0"});
}

TEST_F(CheckpointTest, InvalidJsonHeader) {
  expect_error([&] { SafetensorsFile file(raw_file(R"({"a": {"dtype": "U8", )", random_bytes(4))); },
               {"not valid JSON"});
  expect_error([&] { SafetensorsFile file(raw_file("\xff\xfe garbage", random_bytes(4))); }, {"not valid JSON"});
  expect_error([&] { SafetensorsFile file(raw_file("[1, 2, 3]", random_bytes(4))); }, {"not a JSON object"});
  expect_error([&] { SafetensorsFile file(raw_file(R"({"a": 5})", random_bytes(4))); },
               {"tensor 'a'", "must be a JSON object"});
  expect_error(
      [&] {
        SafetensorsFile file(raw_file(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                                      R"("a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})",
                                      random_bytes(4)));
      },
      {"names 'a' twice"});
}

TEST_F(CheckpointTest, TensorEntryFields) {
  const auto data = random_bytes(16);
  struct Case {
    const char* entry;
    const char* words;
  };
  const std::vector<Case> cases{
      {R"({"shape":[4],"data_offsets":[0,4]})", "missing 'dtype'"},
      {R"({"dtype":"U8","data_offsets":[0,4]})", "missing 'shape'"},
      {R"({"dtype":"U8","shape":[4]})", "missing 'data_offsets'"},
      {R"({"dtype":8,"shape":[4],"data_offsets":[0,4]})", "'dtype' must be a string"},
      {R"({"dtype":"U8","shape":"4","data_offsets":[0,4]})", "'shape' must be an array"},
      {R"({"dtype":"U8","shape":[4.5],"data_offsets":[0,4]})", "'shape' must hold integers"},
      {R"({"dtype":"U8","shape":[-4],"data_offsets":[0,4]})", "negative shape dimension -4"},
      {R"({"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,4]})", "overflows int64"},
      {R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]})", "overflows"},
      {R"({"dtype":"Q4_K","shape":[4],"data_offsets":[0,4]})", "unknown dtype 'Q4_K'"},
      {R"({"dtype":"U8","shape":[4],"data_offsets":[0]})", "'data_offsets' must be an array [begin, end]"},
      {R"({"dtype":"U8","shape":[4],"data_offsets":{"b":0}})", "'data_offsets' must be an array [begin, end]"},
      {R"({"dtype":"U8","shape":[4],"data_offsets":[-4,0]})", "two non-negative integers"},
      {R"({"dtype":"U8","shape":[4],"data_offsets":["0","4"]})", "two non-negative integers"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.entry);
    const fs::path path = raw_file(std::string(R"({"weight":)") + c.entry + "}", data);
    expect_error([&] { SafetensorsFile file(path); }, {c.words, "tensor 'weight'", path.string()});
  }
}

TEST_F(CheckpointTest, OffsetsOutOfRange) {
  const fs::path path = raw_file(R"({"w":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}})", random_bytes(8));
  expect_error([&] { SafetensorsFile file(path); },
               {"tensor 'w'", "data_offsets end 12 is past the end of the data section (8 bytes)"});
  const fs::path huge =
      raw_file(R"({"w":{"dtype":"U8","shape":[8],"data_offsets":[18446744073709551600,18446744073709551608]}})",
               random_bytes(8));
  expect_error([&] { SafetensorsFile file(huge); }, {"tensor 'w'", "past the end of the data section"});
}

TEST_F(CheckpointTest, OffsetsBeginAfterEnd) {
  const fs::path path = raw_file(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[8,4]}})", random_bytes(8));
  expect_error([&] { SafetensorsFile file(path); }, {"tensor 'w'", "begin 8 > end 4"});
}

TEST_F(CheckpointTest, OverlappingTensors) {
  const fs::path path = raw_file(R"({"first":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                                 R"("second":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}})",
                                 random_bytes(16));
  expect_error([&] { SafetensorsFile file(path); }, {"'first'", "'second'", "overlap"});
  // A range inside another, with a third in between in name order.
  const fs::path nested = raw_file(R"({"a":{"dtype":"U8","shape":[16],"data_offsets":[0,16]},)"
                                   R"("b":{"dtype":"U8","shape":[0],"data_offsets":[16,16]},)"
                                   R"("c":{"dtype":"U8","shape":[2],"data_offsets":[10,12]}})",
                                   random_bytes(16));
  expect_error([&] { SafetensorsFile file(nested); }, {"'a'", "'c'", "overlap"});
  // Adjacent ranges and empty tensors are fine.
  const fs::path adjacent = raw_file(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                                     R"("b":{"dtype":"U8","shape":[0],"data_offsets":[4,4]},)"
                                     R"("c":{"dtype":"U8","shape":[8],"data_offsets":[8,16]}})",
                                     random_bytes(16));
  EXPECT_NO_THROW(SafetensorsFile file(adjacent));
}

TEST_F(CheckpointTest, MisalignedOffset) {
  const fs::path path = raw_file(R"({"w":{"dtype":"BF16","shape":[2],"data_offsets":[1,5]}})", random_bytes(8));
  expect_error([&] { SafetensorsFile file(path); }, {"tensor 'w'", "misaligned", "BF16"});
  const fs::path f32 = raw_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})", random_bytes(8));
  expect_error([&] { SafetensorsFile file(f32); }, {"tensor 'w'", "misaligned", "F32"});
}

TEST_F(CheckpointTest, SizeShapeMismatch) {
  const fs::path path = raw_file(R"({"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,6]}})", random_bytes(8));
  expect_error([&] { SafetensorsFile file(path); }, {"tensor 'w'", "byte size 6 does not match shape [2, 2]"});
}

TEST_F(CheckpointTest, MetadataMustBeStrings) {
  const std::string w = R"("w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]})";
  expect_error([&] { SafetensorsFile file(raw_file("{" + w + R"(,"__metadata__":{"n":1}})", random_bytes(4))); },
               {"'__metadata__' value of 'n' must be a string"});
  expect_error([&] { SafetensorsFile file(raw_file("{" + w + R"(,"__metadata__":"x"})", random_bytes(4))); },
               {"'__metadata__' must be an object"});
  SafetensorsFile file(raw_file("{" + w + R"(,"__metadata__":{"format":"pt"}})", random_bytes(4)));
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.tensors().size(), 1u);
}

TEST_F(CheckpointTest, RandomCorruptionOnlyThrowsError) {
  // Random byte changes anywhere in the length field or header: each file either opens (and every
  // tensor then reads within bounds) or throws mxmoe::Error; nothing else may escape.
  const fs::path good = write_small_file();
  const auto bytes = file_bytes(good);
  uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i) header_length = (header_length << 8) | bytes[i];
  std::uniform_int_distribution<size_t> position(0, 8 + header_length - 1);
  std::uniform_int_distribution<int> byte(0, 255), count(1, 4);
  const std::string printable = "0123456789-,:[]{}\"e. ";
  std::uniform_int_distribution<size_t> pick(0, printable.size() - 1);
  const fs::path path = dir_ / "fuzz.safetensors";
  int opened = 0, rejected = 0;
  for (int iter = 0; iter < 300; ++iter) {
    auto mutated = bytes;
    // JSON punctuation and digits half the time: those get past the parser to the deeper checks.
    for (int k = count(rng_); k > 0; --k)
      mutated[position(rng_)] = static_cast<uint8_t>(iter % 2 ? byte(rng_) : printable[pick(rng_)]);
    write_bytes(path, mutated);
    try {
      SafetensorsFile file(path);
      for (const auto& [name, info] : file.tensors()) EXPECT_EQ(file.read(name).size(), info.end - info.begin);
      ++opened;
    } catch (const Error&) {
      ++rejected;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "iteration " << iter << ": non-mxmoe exception escaped: " << e.what();
    }
  }
  EXPECT_GT(rejected, 0);
  std::cout << "[ fuzz ] " << opened << " opened, " << rejected << " rejected\n";
}

// --- config.json --------------------------------------------------------------------------------

TEST_F(CheckpointTest, ConfigRoundTrip) {
  for (TensorNaming naming : {TensorNaming::Original, TensorNaming::HuggingFace}) {
    SCOPED_TRACE(to_string(naming));
    auto config = small_config();
    config.moe.swiglu_limit = 5.3f;  // not representable in few digits: checks the float survives
    config.num_layers = 1;
    const fs::path dir = dir_ / to_string(naming);
    write_checkpoint(dir, config, {random_layer(config.moe)}, naming);
    const json text = json::parse(std::ifstream(dir / "config.json"));
    EXPECT_TRUE(text.contains(naming == TensorNaming::HuggingFace ? "num_local_experts" : "num_experts"));
    // Hugging Face configs say the quantisation; OpenAI's original/config.json has no such key (its
    // ModelConfig would reject one: test_cli.cpp checks every key against that class's fields).
    if (naming == TensorNaming::HuggingFace) EXPECT_EQ(text["quantization_config"]["quant_method"], "mxfp4");
    else EXPECT_FALSE(text.contains("quantization_config")) << text.dump();

    const CheckpointConfig got = read_checkpoint_config(dir / "config.json");
    EXPECT_EQ(got.moe.name, "checkpoint");
    EXPECT_EQ(got.moe.num_experts, 4);
    EXPECT_EQ(got.moe.top_k, 2);
    EXPECT_EQ(got.moe.hidden, 64);
    EXPECT_EQ(got.moe.intermediate, 64);
    EXPECT_EQ(got.moe.swiglu_limit, 5.3f);
    EXPECT_EQ(got.moe.swiglu_alpha, 1.702f);
    EXPECT_EQ(got.moe.routing, RoutingOrder::TopkThenSoftmax);
    EXPECT_EQ(got.num_layers, 1);
    EXPECT_EQ(got.quant_method, "mxfp4");
  }
}

TEST_F(CheckpointTest, ConfigPublishedFormats) {
  // The keys of gpt-oss-20b's Hugging Face config.json (abridged), and of its original/config.json.
  const fs::path hf = dir_ / "hf.json";
  write_text(hf, R"({"architectures": ["GptOssForCausalLM"], "experts_per_token": 4, "hidden_size": 2880,
    "intermediate_size": 2880, "model_type": "gpt_oss", "num_experts_per_tok": 4, "num_hidden_layers": 24,
    "num_local_experts": 32, "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn"],
    "quant_method": "mxfp4"}, "swiglu_limit": 7.0, "vocab_size": 201088})");
  const CheckpointConfig h = read_checkpoint_config(hf);
  EXPECT_EQ(h.moe.num_experts, 32);
  EXPECT_EQ(h.moe.top_k, 4);
  EXPECT_EQ(h.moe.hidden, 2880);
  EXPECT_EQ(h.moe.intermediate, 2880);
  EXPECT_EQ(h.num_layers, 24);
  EXPECT_EQ(h.quant_method, "mxfp4");

  const fs::path original = dir_ / "original.json";
  write_text(original, R"({"num_hidden_layers": 36, "num_experts": 128, "experts_per_token": 4,
    "vocab_size": 201088, "hidden_size": 2880, "intermediate_size": 2880, "swiglu_limit": 6.5, "head_dim": 64})");
  const CheckpointConfig o = read_checkpoint_config(original);
  EXPECT_EQ(o.moe.num_experts, 128);
  EXPECT_EQ(o.moe.top_k, 4);
  EXPECT_EQ(o.num_layers, 36);
  EXPECT_EQ(o.moe.swiglu_limit, 6.5f);
  EXPECT_EQ(o.quant_method, "mxfp4");

  write_text(original, R"({"num_hidden_layers": 2, "num_experts": 4, "experts_per_token": 2,
    "hidden_size": 64, "intermediate_size": 64})");
  EXPECT_EQ(read_checkpoint_config(original).moe.swiglu_limit, 7.0f) << "default when swiglu_limit is absent";
}

TEST_F(CheckpointTest, ConfigNonMxfp4QuantMethod) {
  const fs::path path = dir_ / "config.json";
  write_text(path, R"({"num_local_experts": 4, "num_experts_per_tok": 2, "hidden_size": 64,
    "intermediate_size": 64, "num_hidden_layers": 2, "quantization_config": {"quant_method": "fp8"}})");
  expect_error([&] { read_checkpoint_config(path); }, {"quant_method 'fp8'", "mxfp4", path.string()});
  // The original key set with an explicit quantization_config is checked as well.
  write_text(path, R"({"num_experts": 4, "experts_per_token": 2, "hidden_size": 64,
    "intermediate_size": 64, "num_hidden_layers": 2, "quantization_config": {"quant_method": "gptq"}})");
  expect_error([&] { read_checkpoint_config(path); }, {"quant_method 'gptq'"});
  // And a Checkpoint refuses it too.
  const auto config = small_config();
  write_checkpoint(ckpt_dir(), config, random_layers(config), TensorNaming::HuggingFace);
  write_text(ckpt_dir() / "config.json", R"({"num_local_experts": 4, "num_experts_per_tok": 2, "hidden_size": 64,
    "intermediate_size": 64, "num_hidden_layers": 2, "quantization_config": {"quant_method": "bitsandbytes"}})");
  expect_error([&] { Checkpoint ckpt(ckpt_dir()); }, {"quant_method 'bitsandbytes'"});
}

TEST_F(CheckpointTest, ConfigMissingOrWrongKeys) {
  const fs::path path = dir_ / "config.json";
  const json hf = {{"num_local_experts", 4},   {"num_experts_per_tok", 2}, {"hidden_size", 64},
                   {"intermediate_size", 64},  {"num_hidden_layers", 2},   {"swiglu_limit", 7.0},
                   {"quantization_config", {{"quant_method", "mxfp4"}}}};
  const json original = {{"num_experts", 4},         {"experts_per_token", 2}, {"hidden_size", 64},
                         {"intermediate_size", 64}, {"num_hidden_layers", 2}};
  write_text(path, hf.dump());
  EXPECT_NO_THROW(read_checkpoint_config(path));
  write_text(path, original.dump());
  EXPECT_NO_THROW(read_checkpoint_config(path));

  for (const char* key : {"num_experts_per_tok", "hidden_size", "intermediate_size", "num_hidden_layers"}) {
    json c = hf;
    c.erase(key);
    write_text(path, c.dump());
    expect_error([&] { read_checkpoint_config(path); }, {"missing key '" + std::string(key) + "'"});
  }
  for (const char* key : {"experts_per_token", "hidden_size"}) {
    json c = original;
    c.erase(key);
    write_text(path, c.dump());
    expect_error([&] { read_checkpoint_config(path); }, {"missing key '" + std::string(key) + "'"});
  }
  {
    json c = hf;
    c.erase("num_local_experts");
    write_text(path, c.dump());
    expect_error([&] { read_checkpoint_config(path); }, {"'num_local_experts'", "'num_experts'"});
  }
  {
    json c = hf;
    c.erase("quantization_config");
    write_text(path, c.dump());
    expect_error([&] { read_checkpoint_config(path); }, {"missing key 'quantization_config'"});
  }
  {
    json c = hf;
    c["quantization_config"] = json::object();
    write_text(path, c.dump());
    expect_error([&] { read_checkpoint_config(path); }, {"missing key 'quantization_config.quant_method'"});
  }
  struct Wrong {
    const char* key;
    json value;
    const char* words;
  };
  const std::vector<Wrong> wrongs{
      {"hidden_size", "64", "'hidden_size' must be an integer"},
      {"hidden_size", 64.0, "'hidden_size' must be an integer"},
      {"num_hidden_layers", 0, "'num_hidden_layers' = 0"},
      {"num_local_experts", 1e12, "'num_local_experts' must be an integer"},
      {"num_local_experts", int64_t{1} << 40, "'num_local_experts' = 1099511627776 is out of range"},
      {"swiglu_limit", "7", "'swiglu_limit' must be a number"},
      {"swiglu_limit", 1e300, "'swiglu_limit'"},
      {"quantization_config", "mxfp4", "'quantization_config' must be an object"},
      {"hidden_size", 70, "hidden"},  // not a multiple of 32: MoeConfig::validate
  };
  for (const Wrong& w : wrongs) {
    SCOPED_TRACE(std::string(w.key) + " = " + w.value.dump());
    json c = hf;
    c[w.key] = w.value;
    write_text(path, c.dump());
    expect_error([&] { read_checkpoint_config(path); }, {w.words, path.string()});
  }
  write_text(path, "{\"num_local_experts\": ");
  expect_error([&] { read_checkpoint_config(path); }, {"not valid JSON"});
  expect_error([&] { read_checkpoint_config(dir_ / "absent.json"); }, {"cannot open"});
}

// --- checkpoints ------------------------------------------------------------------------------

TEST_F(CheckpointTest, RoundTripBothNamings) {
  for (TensorNaming naming : {TensorNaming::Original, TensorNaming::HuggingFace}) {
    SCOPED_TRACE(to_string(naming));
    const auto config = small_config();
    const auto layers = random_layers(config);
    ASSERT_NE(layers[0].w1_blocks, layers[1].w1_blocks);
    const fs::path dir = dir_ / to_string(naming);
    write_checkpoint(dir, config, layers, naming);

    // The file carries this naming's names.
    SafetensorsFile file(dir / "model.safetensors");
    const LayerTensorNames names = layer_tensor_names(naming, 1);
    for (const std::string& name : {names.router_weight, names.router_bias, names.w1_blocks, names.w1_scales,
                                    names.w1_bias, names.w2_blocks, names.w2_scales, names.w2_bias})
      EXPECT_TRUE(file.contains(name)) << name;
    EXPECT_EQ(file.tensors().size(), 16u);

    Checkpoint ckpt(dir);
    EXPECT_EQ(ckpt.naming(), naming);
    EXPECT_EQ(ckpt.config().num_layers, 2);
    EXPECT_EQ(ckpt.config().moe.num_experts, 4);
    EXPECT_EQ(ckpt.config().moe.top_k, 2);
    for (int n = 0; n < 2; ++n) expect_layer_equal(ckpt.load_layer(n), layers[n], n);
  }
}

TEST_F(CheckpointTest, TensorNames) {
  const auto o = layer_tensor_names(TensorNaming::Original, 7);
  EXPECT_EQ(o.w1_blocks, "block.7.mlp.mlp1_weight.blocks");
  EXPECT_EQ(o.w1_scales, "block.7.mlp.mlp1_weight.scales");
  EXPECT_EQ(o.w1_bias, "block.7.mlp.mlp1_bias");
  EXPECT_EQ(o.w2_blocks, "block.7.mlp.mlp2_weight.blocks");
  EXPECT_EQ(o.w2_scales, "block.7.mlp.mlp2_weight.scales");
  EXPECT_EQ(o.w2_bias, "block.7.mlp.mlp2_bias");
  EXPECT_EQ(o.router_weight, "block.7.mlp.gate.weight");
  EXPECT_EQ(o.router_bias, "block.7.mlp.gate.bias");
  const auto h = layer_tensor_names(TensorNaming::HuggingFace, 11);
  EXPECT_EQ(h.w1_blocks, "model.layers.11.mlp.experts.gate_up_proj_blocks");
  EXPECT_EQ(h.w1_scales, "model.layers.11.mlp.experts.gate_up_proj_scales");
  EXPECT_EQ(h.w1_bias, "model.layers.11.mlp.experts.gate_up_proj_bias");
  EXPECT_EQ(h.w2_blocks, "model.layers.11.mlp.experts.down_proj_blocks");
  EXPECT_EQ(h.w2_scales, "model.layers.11.mlp.experts.down_proj_scales");
  EXPECT_EQ(h.w2_bias, "model.layers.11.mlp.experts.down_proj_bias");
  EXPECT_EQ(h.router_weight, "model.layers.11.mlp.router.weight");
  EXPECT_EQ(h.router_bias, "model.layers.11.mlp.router.bias");
  EXPECT_EQ(to_string(TensorNaming::Original), "original");
  EXPECT_EQ(to_string(TensorNaming::HuggingFace), "huggingface");
}

TEST_F(CheckpointTest, RoundTripWithoutBias) {
  auto config = small_config();
  config.num_layers = 1;
  const std::vector<MoeLayerData> layers{random_layer(config.moe, /*with_bias=*/false)};
  write_checkpoint(ckpt_dir(), config, layers, TensorNaming::Original);
  Checkpoint ckpt(ckpt_dir());
  expect_layer_equal(ckpt.load_layer(0), layers[0], 0);
}

TEST_F(CheckpointTest, ShardedCheckpoint) {
  // Tensors spread over two files, as the published checkpoints are.
  const auto config = small_config();
  const auto layers = random_layers(config);
  write_checkpoint(ckpt_dir(), config, layers, TensorNaming::HuggingFace);
  std::map<std::string, TensorData> first, second;
  {
    SafetensorsFile file(ckpt_dir() / "model.safetensors");
    for (const auto& [name, info] : file.tensors())
      (name.find(".layers.1.") != std::string::npos ? second : first)[name] =
          TensorData{info.dtype, info.shape, file.read(name)};
  }
  fs::remove(ckpt_dir() / "model.safetensors");
  write_safetensors(ckpt_dir() / "model-00001-of-00002.safetensors", first);
  write_safetensors(ckpt_dir() / "model-00002-of-00002.safetensors", second);
  Checkpoint ckpt(ckpt_dir());
  for (int n = 0; n < 2; ++n) expect_layer_equal(ckpt.load_layer(n), layers[n], n);

  // The same tensor in two files is refused.
  write_safetensors(ckpt_dir() / "model-extra.safetensors", {{"model.layers.0.mlp.router.bias", first.at(
                                                                  "model.layers.0.mlp.router.bias")}});
  expect_error([&] { Checkpoint c(ckpt_dir()); },
               {"'model.layers.0.mlp.router.bias' is present in two files", "model-extra.safetensors"});
}

TEST_F(CheckpointTest, F32BiasConvertedToBf16) {
  auto config = small_config();
  config.num_layers = 1;
  const MoeLayerData layer = random_layer(config.moe);
  write_checkpoint(ckpt_dir(), config, {layer}, TensorNaming::Original);

  // Values exactly representable in bf16 must convert to the same bits; values between two bf16
  // numbers must round to nearest even.
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto f32_bytes = [](const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    return b;
  };
  auto exact = [&](size_t n, std::vector<uint16_t>& bits) {
    std::vector<float> v(n);
    bits.resize(n);
    for (size_t i = 0; i < n; ++i) {
      uint32_t u;
      const float x = normal(rng_);
      std::memcpy(&u, &x, 4);
      bits[i] = static_cast<uint16_t>(u >> 16);
      u &= 0xFFFF0000u;
      std::memcpy(&v[i], &u, 4);
    }
    return v;
  };
  std::vector<uint16_t> w1_bias, router_weight;
  const auto w1 = exact(layer.w1_bias.size(), w1_bias);
  const auto rw = exact(layer.router_weight.size(), router_weight);
  // 1 + 2^-8 is halfway between bf16 1.0 (0x3F80) and 0x3F81: ties to even -> 0x3F80;
  // 1 + 3*2^-8 is halfway between 0x3F81 and 0x3F82 -> 0x3F82; 1 + 2^-8 + 2^-20 rounds up -> 0x3F81.
  const std::vector<float> router_bias{1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-20f, -2.0f};
  const std::vector<uint16_t> router_bias_bits{0x3F80, 0x3F82, 0x3F81, 0xC000};

  const fs::path model = ckpt_dir() / "model.safetensors";
  std::map<std::string, TensorData> tensors;
  std::map<std::string, std::string> metadata;
  {
    SafetensorsFile file(model);
    for (const auto& [name, info] : file.tensors()) tensors[name] = TensorData{info.dtype, info.shape, file.read(name)};
    metadata = file.metadata();
  }
  const auto names = layer_tensor_names(TensorNaming::Original, 0);
  tensors[names.w1_bias] = TensorData{"F32", {4, 128}, f32_bytes(w1)};
  tensors[names.router_weight] = TensorData{"F32", {4, 64}, f32_bytes(rw)};
  tensors[names.router_bias] = TensorData{"F32", {4}, f32_bytes(router_bias)};
  write_safetensors(model, tensors, metadata);

  const MoeLayerData got = Checkpoint(ckpt_dir()).load_layer(0);
  EXPECT_EQ(got.w1_bias, w1_bias);
  EXPECT_EQ(got.router_weight, router_weight);
  EXPECT_EQ(got.router_bias, router_bias_bits);
  EXPECT_EQ(got.w2_bias, layer.w2_bias) << "BF16 tensors next to F32 ones are untouched";
  EXPECT_EQ(got.w1_blocks, layer.w1_blocks);
}

TEST_F(CheckpointTest, WrongDtype) {
  const auto names = layer_tensor_names(TensorNaming::Original, 1);
  write_edited_checkpoint(TensorNaming::Original, [&](auto& t) { t[names.w1_blocks].dtype = "I8"; });
  expect_error([&] { Checkpoint(ckpt_dir()).load_layer(1); },
               {"tensor 'block.1.mlp.mlp1_weight.blocks'", "dtype I8, expected U8"});
  write_edited_checkpoint(TensorNaming::Original, [&](auto& t) { t[names.w2_bias].dtype = "F16"; });
  expect_error([&] { Checkpoint(ckpt_dir()).load_layer(1); },
               {"tensor 'block.1.mlp.mlp2_bias'", "dtype F16, expected BF16 or F32"});
  // The other layer is still readable.
  EXPECT_NO_THROW(Checkpoint(ckpt_dir()).load_layer(0));
}

TEST_F(CheckpointTest, WrongShape) {
  const auto names = layer_tensor_names(TensorNaming::HuggingFace, 0);
  // Same byte count, different shape: only the shape check can catch it.
  write_edited_checkpoint(TensorNaming::HuggingFace, [&](auto& t) { t[names.w1_scales].shape = {4, 256}; });
  expect_error([&] { Checkpoint(ckpt_dir()).load_layer(0); },
               {"tensor 'model.layers.0.mlp.experts.gate_up_proj_scales'", "shape [4, 256], expected [4, 128, 2]"});
  write_edited_checkpoint(TensorNaming::HuggingFace, [&](auto& t) { t[names.w2_blocks].shape = {4, 64, 1, 32}; });
  expect_error([&] { Checkpoint(ckpt_dir()).load_layer(0); },
               {"'model.layers.0.mlp.experts.down_proj_blocks'", "shape [4, 64, 1, 32], expected [4, 64, 2, 16]"});
  write_edited_checkpoint(TensorNaming::HuggingFace, [&](auto& t) { t[names.router_weight].shape = {64, 4}; });
  expect_error([&] { Checkpoint(ckpt_dir()).load_layer(0); },
               {"'model.layers.0.mlp.router.weight'", "shape [64, 4], expected [4, 64]"});
}

TEST_F(CheckpointTest, MissingTensor) {
  for (TensorNaming naming : {TensorNaming::Original, TensorNaming::HuggingFace}) {
    SCOPED_TRACE(to_string(naming));
    const auto names = layer_tensor_names(naming, 1);
    for (const std::string& name : {names.router_bias, names.w2_scales, names.w1_bias}) {
      write_edited_checkpoint(naming, [&](auto& t) { t.erase(name); });
      expect_error([&] { Checkpoint(ckpt_dir()).load_layer(1); }, {"missing tensor '" + name + "'"});
    }
  }
}

TEST_F(CheckpointTest, NamingNotDetected) {
  write_edited_checkpoint(TensorNaming::Original, [&](auto& t) {
    std::map<std::string, TensorData> renamed;
    for (auto& [name, data] : t) renamed["x." + name] = std::move(data);
    t = std::move(renamed);
  });
  expect_error([&] { Checkpoint c(ckpt_dir()); },
               {"cannot detect the tensor naming", "block.0.mlp.mlp1_weight.blocks",
                "model.layers.0.mlp.experts.gate_up_proj_blocks"});
}

TEST_F(CheckpointTest, LayerOutOfRange) {
  const auto config = small_config();
  write_checkpoint(ckpt_dir(), config, random_layers(config), TensorNaming::HuggingFace);
  Checkpoint ckpt(ckpt_dir());
  expect_error([&] { ckpt.load_layer(2); }, {"layer 2 is out of range [0, 2)"});
  expect_error([&] { ckpt.load_layer(-1); }, {"layer -1 is out of range [0, 2)"});
  EXPECT_NO_THROW(ckpt.load_layer(1));
}

TEST_F(CheckpointTest, DirectoryProblems) {
  expect_error([&] { Checkpoint c(dir_ / "nope"); }, {"not a directory"});
  fs::create_directories(ckpt_dir());
  expect_error([&] { Checkpoint c(ckpt_dir()); }, {"no config.json"});
  const auto config = small_config();
  write_checkpoint(ckpt_dir(), config, random_layers(config), TensorNaming::Original);
  fs::remove(ckpt_dir() / "model.safetensors");
  expect_error([&] { Checkpoint c(ckpt_dir()); }, {"no *.safetensors files"});
}

TEST_F(CheckpointTest, CorruptShardInCheckpoint) {
  const auto config = small_config();
  write_checkpoint(ckpt_dir(), config, random_layers(config), TensorNaming::Original);
  const fs::path model = ckpt_dir() / "model.safetensors";
  auto bytes = file_bytes(model);
  bytes.resize(bytes.size() / 2);
  write_bytes(model, bytes);
  expect_error([&] { Checkpoint c(ckpt_dir()); }, {"model.safetensors", "past the end of the data section"});
}

TEST_F(CheckpointTest, WriterRejectsBadInput) {
  auto config = small_config();
  auto layers = random_layers(config);
  expect_error([&] { write_checkpoint(ckpt_dir(), config, {layers[0]}, TensorNaming::Original); },
               {"layers.size() = 1", "config.num_layers = 2"});
  layers[1].w2_scales.pop_back();
  expect_error([&] { write_checkpoint(ckpt_dir(), config, layers, TensorNaming::Original); },
               {"layer 1 w2_scales", "expected 512"});
  layers[1].w2_scales.push_back(1);
  layers[0].router_bias.push_back(1);
  expect_error([&] { write_checkpoint(ckpt_dir(), config, layers, TensorNaming::Original); },
               {"layer 0 router_bias", "expected 4 (or none)"});
  layers[0].router_bias.pop_back();
  config.quant_method = "fp8";
  expect_error([&] { write_checkpoint(ckpt_dir(), config, layers, TensorNaming::Original); }, {"quant_method 'fp8'"});
}

}  // namespace
}  // namespace mxmoe
