// PlanOverride's string form (MXMOE_PLAN): parsed in this one place, errors listing the valid values.
#include "mxmoe/plan_override.hpp"

#include <string>
#include <vector>

#include "kernels/tile_table.hpp"
#include "mxmoe/error.hpp"
#include "plan/tile_rows.hpp"

namespace mxmoe {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

constexpr std::string_view kKeys =
    "mma, wgmma, batch, ksplit, stages, counted, local_route, fused_combine, cluster_combine, mx_expand";

// An integer among `valid`, else an Error naming the source, the key and the valid values.
int int_among(std::string_view source, std::string_view key, std::string_view value, const std::vector<int>& valid) {
  std::string list;
  for (const int v : valid) {
    if (value == std::to_string(v)) return v;
    list += (list.empty() ? "" : ", ") + std::to_string(v);
  }
  detail::throw_error(source, ": ", key, "=", value, " is not valid; ", key, " takes one of ", list);
}
int int_range(std::string_view source, std::string_view key, std::string_view value, int lo, int hi) {
  for (int v = lo; v <= hi; ++v)
    if (value == std::to_string(v)) return v;
  detail::throw_error(source, ": ", key, "=", value, " is not valid; ", key, " takes ", lo, " to ", hi);
}
bool flag(std::string_view source, std::string_view key, std::string_view value) {
  return int_among(source, key, value, {0, 1}) == 1;
}

}  // namespace

// mma= takes the names of the tile table's tensor-core rows (kernels/tile_table.hpp), built or not: the
// planner says when this build lacks one.
std::string to_string(const MmaTileChoice& tile) {
  if (const int row = plan::row_of(tile); row >= 0) return std::string(kernels::kTileTable[row].name);
  const char* form = tile.form == MmaForm::SwapAb     ? "swap"
                     : tile.form == MmaForm::Wgmma    ? "wgmma"
                     : tile.form == MmaForm::WgmmaFp8 ? "fp8wgmma"
                                                      : "";
  return form + std::to_string(tile.rows);
}

PlanOverride parse_plan_override(std::string_view text, std::string_view source) {
  PlanOverride o;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = trim(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    MXMOE_REQUIRE(eq != std::string_view::npos, source, ": '", item, "' is not key=value (keys: ", kKeys, ")");
    const std::string_view key = trim(item.substr(0, eq)), value = trim(item.substr(eq + 1));
    if (key == "mma") {
      std::string list;
      for (const kernels::TileRow& row : kernels::kTileTable) {
        const std::optional<MmaTileChoice> tile = plan::mma_choice_of(row);
        if (!tile) continue;
        if (value == row.name) o.mma_tile = tile;
        list += (list.empty() ? "" : ", ") + std::string(row.name);
      }
      MXMOE_REQUIRE(o.mma_tile.has_value(), source, ": mma=", value, " is not valid; mma takes one of ", list);
    } else if (key == "wgmma") {
      o.wgmma = flag(source, key, value);
    } else if (key == "batch") {
      o.gemv_batch_rows = int_among(source, key, value, plan::gemv_values(&kernels::TileRow::rows));
    } else if (key == "ksplit") {
      o.gemv_ksplit = int_among(source, key, value, {1, 2, 4, 8});
    } else if (key == "stages") {
      o.gemv_stages = int_among(source, key, value, plan::gemv_values(&kernels::TileRow::stages));
    } else if (key == "counted") {
      o.gemv_counted = flag(source, key, value);
    } else if (key == "local_route") {
      o.local_route_tokens = int_range(source, key, value, 0, 4);
    } else if (key == "fused_combine") {
      o.fused_combine_tokens = int_range(source, key, value, 0, 8);
    } else if (key == "cluster_combine") {
      o.cluster_combine = flag(source, key, value);
    } else if (key == "mx_expand") {
      o.mx_expand_intermediate = flag(source, key, value);
    } else {
      detail::throw_error(source, ": unknown key '", key, "' (keys: ", kKeys, ")");
    }
  }
  return o;
}

std::string to_string(const PlanOverride& o) {
  std::string s;
  auto add = [&](std::string_view key, const std::string& value) {
    s += (s.empty() ? "" : ",") + std::string(key) + "=" + value;
  };
  auto num = [](auto v) { return std::to_string(static_cast<int>(v)); };
  if (o.mma_tile) add("mma", to_string(*o.mma_tile));
  if (o.wgmma) add("wgmma", num(*o.wgmma));
  if (o.gemv_batch_rows) add("batch", num(*o.gemv_batch_rows));
  if (o.gemv_ksplit) add("ksplit", num(*o.gemv_ksplit));
  if (o.gemv_stages) add("stages", num(*o.gemv_stages));
  if (o.gemv_counted) add("counted", num(*o.gemv_counted));
  if (o.local_route_tokens) add("local_route", num(*o.local_route_tokens));
  if (o.fused_combine_tokens) add("fused_combine", num(*o.fused_combine_tokens));
  if (o.cluster_combine) add("cluster_combine", num(*o.cluster_combine));
  if (o.mx_expand_intermediate) add("mx_expand", num(*o.mx_expand_intermediate));
  return s;
}

}  // namespace mxmoe
