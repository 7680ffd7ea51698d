// config.json of a gpt-oss checkpoint: Hugging Face keys (num_local_experts, num_experts_per_tok,
// quantization_config required) or the original release's keys (num_experts, experts_per_token;
// quantization_config optional when read and never written: that release is MXFP4 throughout).
#include <cmath>
#include <fstream>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_config.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/error.hpp"

namespace mxmoe {
namespace {

using nlohmann::json;
constexpr uint64_t kMaxConfigBytes = 16ull << 20;  // real ones are a few KB

std::string where(const std::filesystem::path& path) { return "config.json '" + path.string() + "': "; }

int get_int(const std::filesystem::path& path, const json& config, const char* key) {
  MXMOE_REQUIRE(config.contains(key), where(path), "missing key '", key, "'");
  const json& v = config[key];
  MXMOE_REQUIRE(v.is_number_integer(), where(path), "key '", key, "' must be an integer, found ", v.type_name(), " ",
                v.dump());
  const bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int>::max())
                                           : v.get<int64_t>() >= std::numeric_limits<int>::min();
  MXMOE_REQUIRE(fits, where(path), "key '", key, "' = ", v.dump(), " is out of range");
  return v.get<int>();
}

std::string get_quant_method(const std::filesystem::path& path, const json& quant) {
  MXMOE_REQUIRE(quant.is_object(), where(path), "key 'quantization_config' must be an object, found ",
                quant.type_name());
  MXMOE_REQUIRE(quant.contains("quant_method"), where(path), "missing key 'quantization_config.quant_method'");
  const json& method = quant["quant_method"];
  MXMOE_REQUIRE(method.is_string(), where(path), "key 'quantization_config.quant_method' must be a string, found ",
                method.type_name());
  const auto name = method.get<std::string>();
  MXMOE_REQUIRE(name == "mxfp4", where(path), "quant_method '", name,
                "' is not supported: mxmoe reads MXFP4 checkpoints (quant_method 'mxfp4')");
  return name;
}

json read_json(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  MXMOE_REQUIRE(in.is_open(), where(path), "cannot open file");
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  MXMOE_REQUIRE(size >= 0 && static_cast<uint64_t>(size) <= kMaxConfigBytes, where(path), "file size ", size,
                " is not that of a config (limit ", kMaxConfigBytes, " bytes)");
  in.seekg(0);
  std::string text(static_cast<size_t>(size), '\0');
  in.read(text.data(), size);
  MXMOE_REQUIRE(in.gcount() == size, where(path), "short read");
  json config;
  try {
    config = json::parse(text);
  } catch (const json::exception& e) {
    detail::throw_error(where(path), "not valid JSON: ", e.what());
  }
  MXMOE_REQUIRE(config.is_object(), where(path), "not a JSON object (found ", config.type_name(), ")");
  return config;
}

}  // namespace

CheckpointConfig read_checkpoint_config(const std::filesystem::path& config_json) {
  const json config = read_json(config_json);
  const bool hugging_face = config.contains("num_local_experts");
  MXMOE_REQUIRE(hugging_face || config.contains("num_experts"), where(config_json),
                "missing key 'num_local_experts' (Hugging Face config) or 'num_experts' (original release config)");

  CheckpointConfig out;
  out.moe.name = "checkpoint";
  out.moe.routing = RoutingOrder::TopkThenSoftmax;  // gpt-oss (FACTS.md §1)
  out.moe.swiglu_alpha = 1.702f;
  out.moe.num_experts = get_int(config_json, config, hugging_face ? "num_local_experts" : "num_experts");
  out.moe.top_k = get_int(config_json, config, hugging_face ? "num_experts_per_tok" : "experts_per_token");
  out.moe.hidden = get_int(config_json, config, "hidden_size");
  out.moe.intermediate = get_int(config_json, config, "intermediate_size");
  out.num_layers = get_int(config_json, config, "num_hidden_layers");
  MXMOE_REQUIRE(out.num_layers > 0, where(config_json), "key 'num_hidden_layers' = ", out.num_layers,
                ": expected a positive layer count");

  out.moe.swiglu_limit = 7.0f;  // gpt-oss default when the key is absent
  if (config.contains("swiglu_limit")) {
    const json& limit = config["swiglu_limit"];
    MXMOE_REQUIRE(limit.is_number(), where(config_json), "key 'swiglu_limit' must be a number, found ",
                  limit.type_name());
    out.moe.swiglu_limit = limit.get<float>();
    MXMOE_REQUIRE(std::isfinite(out.moe.swiglu_limit), where(config_json), "key 'swiglu_limit' = ", limit.dump(),
                  " does not fit in a float");
  }

  if (config.contains("quantization_config")) {
    out.quant_method = get_quant_method(config_json, config["quantization_config"]);
  } else {
    // An HF config without it describes unquantised (bf16) weights, which this library cannot load.
    MXMOE_REQUIRE(!hugging_face, where(config_json),
                  "missing key 'quantization_config' (a Hugging Face config without it is not an MXFP4 checkpoint)");
    out.quant_method = "mxfp4";
  }

  try {
    out.moe.validate();
  } catch (const Error& e) {
    detail::throw_error(where(config_json), e.what());
  }
  return out;
}

namespace checkpoint_detail {

void write_checkpoint_config(const std::filesystem::path& config_json, const CheckpointConfig& config,
                             TensorNaming naming) {
  const MoeConfig& moe = config.moe;
  nlohmann::ordered_json out;
  if (naming == TensorNaming::HuggingFace) {
    const json quant = {{"quant_method", config.quant_method.empty() ? "mxfp4" : config.quant_method}};
    out = {{"model_type", "gpt_oss"},
           {"num_local_experts", moe.num_experts},
           {"num_experts_per_tok", moe.top_k},
           {"hidden_size", moe.hidden},
           {"intermediate_size", moe.intermediate},
           {"num_hidden_layers", config.num_layers},
           {"swiglu_limit", moe.swiglu_limit},
           {"quantization_config", quant}};
  } else {
    // The MoE keys of OpenAI's original/config.json, named and ordered as the fields of its ModelConfig
    // (gpt_oss/torch/model.py), which takes them as keyword arguments and so rejects any other key:
    // no quantization_config (that release is MXFP4 throughout).
    out = {{"num_hidden_layers", config.num_layers},
           {"num_experts", moe.num_experts},
           {"experts_per_token", moe.top_k},
           {"hidden_size", moe.hidden},
           {"intermediate_size", moe.intermediate},
           {"swiglu_limit", moe.swiglu_limit}};
  }
  std::ofstream file(config_json, std::ios::trunc);
  MXMOE_REQUIRE(file.is_open(), where(config_json), "cannot open for writing");
  file << out.dump(2) << '\n';
  file.flush();
  MXMOE_REQUIRE(file.good(), where(config_json), "write failed");
}

}  // namespace checkpoint_detail
}  // namespace mxmoe
