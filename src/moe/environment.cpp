// The one place that reads the environment: MXMOE_BACKEND, MXMOE_PLAN, MXMOE_TUNE_FILE and MXMOE_LOG
// become RunnerOptions (runner.hpp). Forcing any part of a plan goes through MXMOE_PLAN alone.
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "mxmoe/error.hpp"
#include "mxmoe/runner.hpp"

namespace mxmoe {
namespace {

std::optional<std::string> env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

}  // namespace

std::optional<Backend> backend_from_env() {
  const std::optional<std::string> value = env("MXMOE_BACKEND");
  if (!value) return std::nullopt;
  try {
    return parse_backend(*value);
  } catch (const Error&) {
    std::string names;
    for (const std::string& name : backend_names()) names += (names.empty() ? "" : ", ") + name;
    detail::throw_error("MXMOE_BACKEND: '", *value, "' is not a backend; valid backends are: ", names,
                        " (or leave it unset)");
  }
}

RunnerOptions with_environment(RunnerOptions options) {
  if (options.use_env)
    if (const std::optional<Backend> backend = backend_from_env()) options.backend = *backend;
  if (options.plan.empty())
    if (const std::optional<std::string> plan = env("MXMOE_PLAN")) options.plan = parse_plan_override(*plan, "MXMOE_PLAN");
  if (options.tune_file.empty())
    if (const std::optional<std::string> path = env("MXMOE_TUNE_FILE")) options.tune_file = *path;
  if (const std::optional<std::string> log = env("MXMOE_LOG")) {
    MXMOE_REQUIRE(*log == "plan", "MXMOE_LOG: '", *log, "' is not valid; the one value is 'plan'");
    options.log_plan = true;
  }
  return options;
}

}  // namespace mxmoe
