// `mxmoe bench --tune` (bench_tune.hpp).
#include "bench_tune.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <fstream>
#include <iomanip>
#include <iostream>

#include "kernels/sm90/wgmma_gemm.hpp"
#include "mxmoe/error.hpp"
#include "mxmoe/plan_override.hpp"
#include "mxmoe/runner.hpp"
#include "plan/tile_rows.hpp"
#include "plan/tune_table.hpp"

namespace mxmoe::cli::bench {

void write_tune_table(const TuneRequest& request, const MoeConfig& cfg, const GpuInfo& gpu, const MoeLayerData& host,
                      int layers, const DeviceBuffer& d_hidden, const DeviceBuffer& d_out,
                      const std::vector<DeviceBuffer>& d_logits, cudaStream_t stream, GpuMonitor& monitor) {
  struct Candidate {
    const kernels::TileRow* row;
    std::string name;     // the MXMOE_PLAN form that forces it, e.g. "mma=swap16"
    plan::TileForce force;
    TunePlan tune;        // what the tune table says where it wins
  };
  std::vector<Candidate> candidates;
  for (const size_t r : plan::tune_candidates()) {
    const kernels::TileRow& row = kernels::kTileTable[r];
    const plan::TileForce force = plan::force_of(row);
    candidates.push_back({&row, to_string(force.plan), force, *plan::tune_plan_of(row)});
  }
  std::vector<int64_t> tokens;
  for (const int64_t t : request.tokens)
    if (t > 0) tokens.push_back(t);
  std::sort(tokens.begin(), tokens.end());
  MXMOE_REQUIRE(!tokens.empty(), "--tune: needs a batch size above 0 in --tokens");
  const auto rows_per_expert = [&](int64_t t) {
    const int64_t pairs = t * cfg.top_k;
    return static_cast<double>(pairs) / static_cast<double>(std::min<int64_t>(cfg.num_experts, pairs));
  };
  RunnerOptions ropt;
  ropt.max_tokens = tokens.back();
  ropt.use_env = false;
  std::vector<std::vector<double>> us(candidates.size(), std::vector<double>(tokens.size(), INFINITY));
  for (size_t c = 0; c < candidates.size(); ++c) {
    const kernels::TileRow& row = *candidates[c].row;
    if ((row.archs & kernels::arch_of(gpu.code_arch / 10, gpu.code_arch % 10)) == 0 ||
        (row.family == kernels::TileFamily::Wgmma && !sm90::wgmma_runs(gpu.index)))
      continue;
    ropt.backend = candidates[c].force.backend;
    ropt.plan = candidates[c].force.plan;
    std::vector<MoeRunner> runners;
    try {
      for (int l = 0; l < layers; ++l) runners.emplace_back(cfg, host.view(), ropt);
    } catch (const Error& e) {  // e.g. the 16-row batch does not fit this device at this shape
      std::cout << "tune: " << candidates[c].name << " skipped: " << e.what() << "\n";
      runners.clear();
    }
    if (runners.empty()) continue;
    DeviceBuffer ws(std::max<size_t>(runners[0].workspace_bytes(), 1));
    for (size_t ti = 0; ti < tokens.size(); ++ti) {
      const Timing timing = time_graph(stream, request.warmup, request.iterations, monitor, [&] {
        for (int l = 0; l < layers; ++l)
          runners[l].forward(d_hidden.get<uint16_t>(), d_logits[l].get<float>(), tokens[ti], d_out.get<uint16_t>(),
                             ws.get(), ws.bytes(), stream);
      });
      us[c][ti] = timing.ms * 1e3 / layers;
    }
    progress(c + 1, candidates.size(), "tune candidates");
  }
  TuneTable table;
  table.device = gpu.name;
  // The code's, as the planner's caps read it (plan/device_caps.hpp).
  table.compute_capability = std::to_string(gpu.code_arch / 10) + "." + std::to_string(gpu.code_arch % 10);
  table.experts = cfg.num_experts;
  table.top_k = cfg.top_k;
  table.hidden = cfg.hidden;
  table.intermediate = cfg.intermediate;
  std::cout << "tune: us per layer (";
  for (size_t c = 0; c < candidates.size(); ++c) std::cout << (c ? ", " : "") << candidates[c].name;
  std::cout << ") -> choice\n";
  int previous = -1;
  for (size_t ti = 0; ti < tokens.size(); ++ti) {
    int best = 0;
    for (size_t c = 1; c < candidates.size(); ++c)
      if (us[c][ti] < us[best][ti]) best = static_cast<int>(c);
    std::cout << std::setw(6) << tokens[ti] << std::fixed << std::setprecision(1);
    for (size_t c = 0; c < candidates.size(); ++c) std::cout << std::setw(10) << us[c][ti];
    std::cout << "  -> " << candidates[best].name << "\n";
    if (best != previous) {
      if (!table.plans.empty())  // close the previous run between its last and this first batch size
        table.plans.back().max_rows_per_expert = std::sqrt(rows_per_expert(tokens[ti - 1]) * rows_per_expert(tokens[ti]));
      table.plans.push_back(candidates[best].tune);
      previous = best;
    }
  }
  // Equal rows per expert on both sides of a boundary cannot separate plans: keep the later choice.
  for (size_t p = 0; p + 1 < table.plans.size();)
    if (p > 0 && table.plans[p].max_rows_per_expert <= table.plans[p - 1].max_rows_per_expert)
      table.plans.erase(table.plans.begin() + static_cast<std::ptrdiff_t>(p));
    else
      ++p;
  const std::string json = tune_table_to_json(table);
  (void)parse_tune_table(json, "--tune output");  // what the runner will read back
  std::ofstream f(request.path);
  MXMOE_REQUIRE(f.good(), "--tune: cannot write '", request.path, "'");
  f << json;
  std::cout << "wrote " << request.path << " (use it with MXMOE_TUNE_FILE=" << request.path << ")\n";
}

}  // namespace mxmoe::cli::bench
