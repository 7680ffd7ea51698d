// Backend names and the resolution of Backend::Auto (MXMOE_BACKEND: environment.cpp).
#include <algorithm>
#include <array>
#include <cctype>
#include <string>

#include "mxmoe/device.hpp"
#include "mxmoe/error.hpp"
#include "mxmoe/runner.hpp"

namespace mxmoe {
namespace {

struct BackendName {
  Backend backend;
  const char* name;
};
constexpr std::array kBackendNames{
    BackendName{Backend::Auto, "auto"},
    BackendName{Backend::Reference, "reference"},
    BackendName{Backend::Gemv, "gemv"},
    BackendName{Backend::Mma, "mma"},
    BackendName{Backend::MxEmulated, "mx-emulated"},
    BackendName{Backend::Mx, "mx"},
};

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

std::string joined_names() {
  std::string out;
  for (const auto& entry : kBackendNames) out += (out.empty() ? "" : ", ") + std::string(entry.name);
  return out;
}

}  // namespace

std::string to_string(Backend backend) {
  for (const auto& entry : kBackendNames)
    if (entry.backend == backend) return entry.name;
  return "unknown";
}

std::vector<std::string> backend_names() {
  std::vector<std::string> names;
  for (const auto& entry : kBackendNames) names.emplace_back(entry.name);
  return names;
}

Backend parse_backend(std::string_view name) {
  const std::string key = lower(name);
  for (const auto& entry : kBackendNames)
    if (key == entry.name) return entry.backend;
  detail::throw_error("backend: unknown name '", name, "'; valid backends are: ", joined_names());
}

// Auto is only ever a runner's backend once resolved to the GPU planner (resolve_backend).
bool backend_on_gpu(Backend backend) { return backend != Backend::Reference; }

bool backend_uses_mxfp8(Backend backend) { return backend == Backend::MxEmulated || backend == Backend::Mx; }

Backend resolve_backend(const RunnerOptions& options) {
  Backend backend = options.backend;
  if (options.use_env)
    if (const std::optional<Backend> from_env = backend_from_env()) backend = *from_env;
  if (backend == Backend::Auto) return gpu_available() ? Backend::Auto : Backend::Reference;
  MXMOE_REQUIRE(!backend_on_gpu(backend) || gpu_available(), "backend: '", to_string(backend),
                "' needs a CUDA GPU, and none is usable here (", probe().no_gpu_reason,
                "); use 'reference' or 'auto'");
  return backend;
}

}  // namespace mxmoe
