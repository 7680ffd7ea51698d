#pragma once
// write_checkpoint leaves out empty bias and router tensors and records their names in the
// safetensors metadata, so that load_layer can tell "deliberately absent" from "missing"
// (a real checkpoint that lacks a tensor is an error, never a silent zero bias).
#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace mxmoe::checkpoint_detail {

inline constexpr const char* kAbsentTensorsKey = "mxmoe.absent_tensors";  // comma-separated names

inline std::vector<std::string> parse_absent(const std::map<std::string, std::string>& metadata) {
  std::vector<std::string> names;
  const auto it = metadata.find(kAbsentTensorsKey);
  if (it == metadata.end()) return names;
  size_t start = 0;
  while (start <= it->second.size()) {
    const size_t comma = std::min(it->second.find(',', start), it->second.size());
    if (comma > start) names.push_back(it->second.substr(start, comma - start));
    start = comma + 1;
  }
  return names;
}

inline std::string format_absent(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : ",") + name;
  return out;
}

}  // namespace mxmoe::checkpoint_detail
