#pragma once
// What a benchmark record (bench/README.md) says besides its timings: the commit, the driver, the
// date, and the clocks and power of each timed phase, as JSON and as the table's header note.
// Shared by `mxmoe bench` and `mxmoe bench-multi`.
#include <nlohmann/json.hpp>
#include <string>

#include "gpu_monitor.hpp"

namespace mxmoe::cli::bench {

// The commit a record names: MXMOE_COMMIT from the environment (scripts pass it to machines whose
// copy of the tree has no git history), else the one read when the build was configured.
std::string commit_id();

// The kernel driver's version line, where the system exposes it; empty elsewhere.
std::string driver_string();

// Now, UTC, as "2026-01-31T12:00:00Z".
std::string utc_now();

// The record's "gpu" object of a timed phase (bench/README.md); null without samples.
nlohmann::ordered_json gpu_json(const GpuSampleSummary& g);

// " at 1755 MHz, sw_power_cap in 80% of samples" for the table's header line; empty without samples.
std::string clock_note(const GpuSampleSummary& g);

}  // namespace mxmoe::cli::bench
