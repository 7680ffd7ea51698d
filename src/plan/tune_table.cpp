// The planner's preference table (tune_table.hpp): parsing, validation, selection.
#include "plan/tune_table.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kernels/tile_table.hpp"
#include "mxmoe/error.hpp"
#include "plan/tile_rows.hpp"

namespace mxmoe {
namespace {

// The m16 tile counts of the tile table's rows of `family` (all: every tensor-core family), e.g. "1, 2, 4 or 8".
std::string m_tiles_list(std::optional<kernels::TileFamily> family) {
  std::vector<int> counts;
  for (const kernels::TileRow& r : kernels::kTileTable)
    if (plan::mma_choice_of(r) && (!family || r.family == *family) &&
        std::find(counts.begin(), counts.end(), r.rows / 16) == counts.end())
      counts.push_back(r.rows / 16);
  std::sort(counts.begin(), counts.end());
  std::string s;
  for (size_t i = 0; i < counts.size(); ++i)
    s += (i == 0 ? "" : i + 1 == counts.size() ? " or " : ", ") + std::to_string(counts[i]);
  return s;
}

}  // namespace

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
    // The tile must be a row of the tile table (kernels/tile_table.hpp), built here or not: a table
    // written elsewhere may name a tile this build lacks, and the planner then passes over it.
    if (plan.mma) {
      using kernels::TileFamily;
      plan.m_tiles = field(p, "m_tiles", 0, where.c_str());
      auto has_tile = [&](MmaForm form) { return plan::row_of(MmaTileChoice{16 * plan.m_tiles, form}) >= 0; };
      MXMOE_REQUIRE(has_tile(MmaForm::Plain) || has_tile(MmaForm::SwapAb) || has_tile(MmaForm::Wgmma), source, ": ",
                    where, ".m_tiles must be ", m_tiles_list(std::nullopt), ", got ", plan.m_tiles);
      if (p.contains("swap_ab")) {
        MXMOE_REQUIRE(p.at("swap_ab").is_boolean(), source, ": ", where, ".swap_ab must be true or false");
        plan.swap_ab = p.at("swap_ab").get<bool>();
      }
      if (p.contains("wgmma")) {
        MXMOE_REQUIRE(p.at("wgmma").is_boolean(), source, ": ", where, ".wgmma must be true or false");
        plan.wgmma = p.at("wgmma").get<bool>();
        MXMOE_REQUIRE(!plan.wgmma || !plan.swap_ab, source, ": ", where, ".wgmma: a plan is wgmma or swap_ab, not both");
      }
      const MmaForm form = plan.wgmma ? MmaForm::Wgmma : plan.swap_ab ? MmaForm::SwapAb : MmaForm::Plain;
      const TileFamily tile_family = plan.wgmma ? TileFamily::Wgmma : plan.swap_ab ? TileFamily::Swap : TileFamily::Mma;
      MXMOE_REQUIRE(has_tile(form), source, ": ", where,
                    plan.wgmma ? ".wgmma: the wgmma" : plan.swap_ab ? ".swap_ab: the swap-AB" : ".m_tiles: the plain",
                    " tiles have m_tiles ", m_tiles_list(tile_family), ", got ", plan.m_tiles);
    } else if (p.contains("batch_rows")) {
      plan.batch_rows = field(p, "batch_rows", 0, where.c_str());
      const std::vector<int> batches = plan::gemv_values(&kernels::TileRow::rows);
      std::string list;
      for (const int b : batches) list += (list.empty() ? "" : " or ") + std::to_string(b);
      MXMOE_REQUIRE(std::find(batches.begin(), batches.end(), plan.batch_rows) != batches.end(), source, ": ", where,
                    ".batch_rows must be ", list, ", got ", plan.batch_rows);
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
