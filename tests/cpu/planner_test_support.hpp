#pragma once
// The planner's input for a named target, as the planner's CPU tests build it (test_planner.cpp,
// test_tile_table.cpp).
#include <string>

#include "mxmoe/config.hpp"
#include "mxmoe/runner.hpp"
#include "plan/device_caps.hpp"
#include "plan/planner.hpp"

namespace mxmoe::plan {

inline PlannerInput input_for(const std::string& target, const MoeConfig& config, Backend backend = Backend::Auto) {
  PlannerInput in;
  in.caps = target_caps(target);
  in.fits = fits_for_caps(in.caps);
  in.config = config;
  in.backend = backend;
  return in;
}

}  // namespace mxmoe::plan
