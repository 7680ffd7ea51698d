// Backend names and the resolution of Backend::Auto (MXMOE_BACKEND: environment.cpp).
#include <algorithm>
#include <array>
#include <cctype>
#include <string>

#include <cuda_runtime.h>

#include "common/cuda_check.hpp"
#include "mxmoe/device.hpp"
#include "plan/device_caps.hpp"
#include "plan/planner.hpp"
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

// The caps the runner plans for: its target's, else the current device's.
plan::DeviceCaps plan_caps(const RunnerOptions& options) {
  if (!options.target.empty()) return plan::target_caps(options.target);
  int device = 0;
  MXMOE_CUDA_CHECK(cudaGetDevice(&device));
  return plan::probe_caps(device);
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

std::string to_string(Precision precision) { return precision == Precision::Fp8 ? "fp8" : "bf16"; }

Precision parse_precision(std::string_view name) {
  const std::string key = lower(name);
  if (key == "bf16") return Precision::Bf16;
  if (key == "fp8") return Precision::Fp8;
  detail::throw_error("precision: unknown name '", name, "'; valid precisions are: bf16, fp8");
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
  MXMOE_REQUIRE(options.precision == Precision::Bf16 || (backend != Backend::Gemv && backend != Backend::Mma),
                "precision: 'fp8' needs backend auto, mx, mx-emulated or reference; backend '", to_string(backend),
                "' is W4A16 (bf16 activations) only");
  if (backend == Backend::Auto && !gpu_available()) return Backend::Reference;
  // fp8 on an SM120/SM121 or SM89 GPU, or for such a target: the MXFP8 path (plan::auto_backend_for).
  if (backend == Backend::Auto && options.precision == Precision::Fp8)
    return plan::auto_backend_for(options.precision, plan_caps(options));
  if (backend == Backend::Auto) return Backend::Auto;
  MXMOE_REQUIRE(!backend_on_gpu(backend) || gpu_available(), "backend: '", to_string(backend),
                "' needs a CUDA GPU, and none is usable here (", probe().no_gpu_reason,
                "); use 'reference' or 'auto'");
  return backend;
}

}  // namespace mxmoe
