// The planner's preference table (tune_table.hpp): parsing, validation, selection.
#include "plan/tune_table.hpp"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "mxmoe/error.hpp"

namespace mxmoe {

bool TuneTable::matches(const std::string& device_name, const std::string& cc, const MoeConfig& config) const {
  return device == device_name && compute_capability == cc && experts == config.num_experts &&
         top_k == config.top_k && hidden == config.hidden && intermediate == config.intermediate;
}

const TunePlan& TuneTable::plan_for(double rows_per_expert) const {
  for (const TunePlan& p : plans)
    if (rows_per_expert <= p.max_rows_per_expert) return p;
  return plans.back();
}

TuneTable parse_tune_table(const std::string& json_text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    detail::throw_error(source, ": not valid JSON (", e.what(), ")");
  }
  auto field = [&](const nlohmann::json& obj, const char* key, auto kind, const char* where) {
    MXMOE_REQUIRE(obj.is_object() && obj.contains(key), source, ": ", where, " has no '", key, "'");
    const nlohmann::json& v = obj.at(key);
    using T = decltype(kind);
    if constexpr (std::is_same_v<T, std::string>) {
      MXMOE_REQUIRE(v.is_string(), source, ": ", where, ".", key, " must be a string");
      return v.get<std::string>();
    } else if constexpr (std::is_same_v<T, int>) {
      MXMOE_REQUIRE(v.is_number_integer(), source, ": ", where, ".", key, " must be an integer");
      return v.get<int>();
    } else {
      MXMOE_REQUIRE(v.is_number(), source, ": ", where, ".", key, " must be a number");
      return v.get<double>();
    }
  };
  TuneTable t;
  t.device = field(j, "device", std::string{}, "the table");
  t.compute_capability = field(j, "compute_capability", std::string{}, "the table");
  MXMOE_REQUIRE(j.contains("shape"), source, ": the table has no 'shape'");
  const auto& shape = j.at("shape");
  t.experts = field(shape, "experts", 0, "shape");
  t.top_k = field(shape, "top_k", 0, "shape");
  t.hidden = field(shape, "hidden", 0, "shape");
  t.intermediate = field(shape, "intermediate", 0, "shape");
  MXMOE_REQUIRE(j.contains("plans") && j.at("plans").is_array() && !j.at("plans").empty(), source,
                ": 'plans' must be a non-empty array");
  const auto& plans = j.at("plans");
  for (size_t i = 0; i < plans.size(); ++i) {
    const std::string where = "plans[" + std::to_string(i) + "]";
    const auto& p = plans[i];
    TunePlan plan;
    const std::string family = field(p, "family", std::string{}, where.c_str());
    MXMOE_REQUIRE(family == "gemv" || family == "mma", source, ": ", where, ".family must be 'gemv' or 'mma', got '",
                  family, "'");
    plan.mma = family == "mma";
    if (plan.mma) {
      plan.m_tiles = field(p, "m_tiles", 0, where.c_str());
      MXMOE_REQUIRE(plan.m_tiles == 1 || plan.m_tiles == 2 || plan.m_tiles == 4 || plan.m_tiles == 8, source, ": ",
                    where, ".m_tiles must be 1, 2, 4 or 8, got ", plan.m_tiles);
      if (p.contains("swap_ab")) {
        MXMOE_REQUIRE(p.at("swap_ab").is_boolean(), source, ": ", where, ".swap_ab must be true or false");
        plan.swap_ab = p.at("swap_ab").get<bool>();  // every m_tiles has a swap-AB tile
      }
      if (p.contains("wgmma")) {
        MXMOE_REQUIRE(p.at("wgmma").is_boolean(), source, ": ", where, ".wgmma must be true or false");
        plan.wgmma = p.at("wgmma").get<bool>();
        MXMOE_REQUIRE(!plan.wgmma || !plan.swap_ab, source, ": ", where, ".wgmma: a plan is wgmma or swap_ab, not both");
        MXMOE_REQUIRE(!plan.wgmma || plan.m_tiles != 1, source, ": ", where,
                      ".wgmma: the wgmma tiles have m_tiles 2, 4 or 8, got 1");
      }
    } else if (p.contains("batch_rows")) {
      plan.batch_rows = field(p, "batch_rows", 0, where.c_str());
      MXMOE_REQUIRE(plan.batch_rows == 8 || plan.batch_rows == 16, source, ": ", where,
                    ".batch_rows must be 8 or 16, got ", plan.batch_rows);
    }
    const bool last = i + 1 == plans.size();
    if (!last) {
      plan.max_rows_per_expert = field(p, "max_rows_per_expert", 0.0, where.c_str());
      MXMOE_REQUIRE(plan.max_rows_per_expert > 0 && (t.plans.empty() || plan.max_rows_per_expert >
                                                                            t.plans.back().max_rows_per_expert),
                    source, ": ", where, ".max_rows_per_expert must be positive and increasing");
    } else {
      MXMOE_REQUIRE(!p.contains("max_rows_per_expert"), source, ": ", where,
                    " is the last plan and covers every larger count: it takes no max_rows_per_expert");
      plan.max_rows_per_expert = 1e300;
    }
    t.plans.push_back(plan);
  }
  return t;
}

std::string tune_table_to_json(const TuneTable& t) {
  nlohmann::ordered_json j;
  j["device"] = t.device;
  j["compute_capability"] = t.compute_capability;
  j["shape"] = {{"experts", t.experts}, {"top_k", t.top_k}, {"hidden", t.hidden}, {"intermediate", t.intermediate}};
  j["plans"] = nlohmann::ordered_json::array();
  for (size_t i = 0; i < t.plans.size(); ++i) {
    nlohmann::ordered_json p;
    if (i + 1 < t.plans.size()) p["max_rows_per_expert"] = t.plans[i].max_rows_per_expert;
    p["family"] = t.plans[i].mma ? "mma" : "gemv";
    if (t.plans[i].mma) {
      p["m_tiles"] = t.plans[i].m_tiles;
      if (t.plans[i].swap_ab) p["swap_ab"] = true;
      if (t.plans[i].wgmma) p["wgmma"] = true;
    } else if (t.plans[i].batch_rows != 8) p["batch_rows"] = t.plans[i].batch_rows;
    j["plans"].push_back(p);
  }
  return j.dump(2) + "\n";
}

std::optional<TuneTable> load_tune_table(const std::string& path) {
  std::error_code ec;
  if (path.empty() || !std::filesystem::is_regular_file(path, ec)) return std::nullopt;
  std::ifstream f(path);
  MXMOE_REQUIRE(f.good(), path, ": cannot read the tune table");
  std::stringstream text;
  text << f.rdbuf();
  return parse_tune_table(text.str(), path);
}

}  // namespace mxmoe
