#pragma once
// The measured preference table of the GPU planner (`mxmoe bench --tune` writes it; the runner reads
// it when present): for one device and one layer shape, which kernel family and tile to run at each
// number of rows per expert. JSON:
//   {"device": "NVIDIA H200", "compute_capability": "9.0",
//    "shape": {"experts": 128, "top_k": 4, "hidden": 2880, "intermediate": 2880},
//    "plans": [{"max_rows_per_expert": 3, "family": "gemv"},
//              {"max_rows_per_expert": 6, "family": "gemv", "batch_rows": 16},
//              {"max_rows_per_expert": 24, "family": "mma", "m_tiles": 1},
//              {"max_rows_per_expert": 48, "family": "mma", "m_tiles": 2, "swap_ab": true},
//              {"family": "mma", "m_tiles": 8, "wgmma": true}]}
// Plans are in increasing max_rows_per_expert; the last has none (it covers every larger count).
#include <optional>
#include <string>
#include <vector>

#include "mxmoe/config.hpp"

namespace mxmoe {

struct TunePlan {
  double max_rows_per_expert = 0;  // this plan serves rows per expert <= this (the last: any)
  bool mma = false;                // the tensor-core family, else the GEMV family
  int m_tiles = 4;                 // tensor-core m16 tiles per block: 1, 2, 4 or 8 (8: swap-AB or wgmma only)
  bool swap_ab = false;            // the swap-AB form of the tile (any m_tiles; absent in a table: false)
  bool wgmma = false;              // Hopper's wgmma tile (m_tiles 2, 4 or 8; absent: false; not with swap_ab)
  int batch_rows = 8;              // GEMV rows per weight pass: 8 or 16 (absent in a table: 8)
};

struct TuneTable {
  std::string device;              // cudaDeviceProp::name
  std::string compute_capability;  // "major.minor"
  int experts = 0, top_k = 0, hidden = 0, intermediate = 0;
  std::vector<TunePlan> plans;

  bool matches(const std::string& device_name, const std::string& cc, const MoeConfig& config) const;
  const TunePlan& plan_for(double rows_per_expert) const;
};

// Parses and validates a table; a malformed one is an Error naming `source` and the field.
TuneTable parse_tune_table(const std::string& json_text, const std::string& source);
std::string tune_table_to_json(const TuneTable& table);
// Reads `path` when it exists (nullopt when it does not; an Error when it is malformed).
std::optional<TuneTable> load_tune_table(const std::string& path);

}  // namespace mxmoe
