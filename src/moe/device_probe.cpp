// The capability probe: what this build was compiled for, and what the machine's GPUs can run.
#include <cuda_runtime.h>

#include <algorithm>
#include <cctype>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string_view>
#include <sstream>

#include "common/cuda_check.hpp"
#include "mxmoe/device.hpp"
#include "mxmoe/error.hpp"
#include "mxmoe/runner.hpp"

#ifndef MXMOE_CUDA_ARCHS
#define MXMOE_CUDA_ARCHS ""
#endif
#ifndef MXMOE_VERSION
#define MXMOE_VERSION "0"
#endif

namespace mxmoe {
namespace {

struct ParsedArch {
  int major = 0, minor = 0;
  char suffix = 0;  // 0, 'a' or 'f'
};

// Accepts "90a", "sm_90a", "compute_120f", "sm_121a-real", "89": two or three digits (the last one the
// minor version), an optional 'a'/'f' suffix. Hand-parsed: no std::regex in a library that is loaded
// next to other C++ runtimes (PyTorch).
ParsedArch parse_arch(const std::string& arch) {
  auto junk = [&] {
    return Error("arch: '" + arch + "' is not a CUDA architecture (expected e.g. 90a, sm_120a, 121f, 89)");
  };
  std::string_view s = arch;
  if (s.starts_with("sm_")) s.remove_prefix(3);
  else if (s.starts_with("compute_")) s.remove_prefix(8);
  if (s.ends_with("-real")) s.remove_suffix(5);
  else if (s.ends_with("-virtual")) s.remove_suffix(8);
  ParsedArch parsed;
  if (!s.empty() && (s.back() == 'a' || s.back() == 'f')) {
    parsed.suffix = s.back();
    s.remove_suffix(1);
  }
  if (s.size() < 2 || s.size() > 3 || s[0] == '0' ||
      !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    throw junk();
  parsed.minor = s.back() - '0';
  parsed.major = std::stoi(std::string(s.substr(0, s.size() - 1)));
  return parsed;
}

// CMAKE_CUDA_ARCHITECTURES as built: "80-virtual" (PTX only) and "90a-real" (SASS only) keep their
// suffixes here; compiled_archs() gives the canonical names.
std::vector<std::string> build_archs() {
  std::vector<std::string> out;
  std::stringstream ss(MXMOE_CUDA_ARCHS);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

std::vector<std::string> compiled_archs() {
  std::vector<std::string> out;
  for (const std::string& item : build_archs()) out.push_back(canonical_arch(item));
  return out;
}

}  // namespace

std::string canonical_arch(const std::string& arch) {
  const ParsedArch p = parse_arch(arch);
  std::string out = "sm_" + std::to_string(p.major) + std::to_string(p.minor);
  if (p.suffix) out += p.suffix;
  return out;
}

std::string best_target_for(int cc_major, int cc_minor) {
  // Arch-specific features (wgmma, block-scaled mma.sync, the FP4 convert) exist from SM90 on and are
  // reachable only through the `a` target of that exact chip: a GB10 (12.1) needs sm_121a, not sm_120a.
  std::string out = "sm_" + std::to_string(cc_major) + std::to_string(cc_minor);
  if (cc_major >= 9) out += 'a';
  return out;
}

std::string family_target_for(int cc_major, int cc_minor) {
  (void)cc_minor;
  // kernels/common/arch_features.cuh: the block-scaled MMA is in the SM12x family's feature set from
  // sm_120f on; Hopper's wgmma has no family target.
  return cc_major == 12 ? "sm_120f" : "";
}

bool cubin_runs_on(const std::string& arch, int cc_major, int cc_minor) {
  const ParsedArch p = parse_arch(arch);
  if (p.suffix == 'a') return p.major == cc_major && p.minor == cc_minor;
  return p.major == cc_major && cc_minor >= p.minor;  // plain and family targets
}

bool ptx_runs_on(const std::string& arch, int cc_major, int cc_minor) {
  const ParsedArch p = parse_arch(arch);
  if (p.suffix != 0) return cubin_runs_on(arch, cc_major, cc_minor);  // `a` and `f` PTX: as their cubins
  return cc_major * 10 + cc_minor >= p.major * 10 + p.minor;
}

namespace {

// The highest entry of `build_archs` (compute capability x 10) that is not a `skip` entry ("-virtual":
// no cubin; "-real": no PTX) and that `runs` on such a device; 0: none.
int best_arch_for(const std::vector<std::string>& build_archs, std::string_view skip,
                  bool (*runs)(const std::string&, int, int), int cc_major, int cc_minor) {
  int best = 0;
  for (const std::string& arch : build_archs)
    if (!arch.ends_with(skip) && runs(arch, cc_major, cc_minor)) {
      const ParsedArch p = parse_arch(arch);
      best = std::max(best, p.major * 10 + p.minor);
    }
  return best;
}

// The best cubin (SASS) of `build_archs` that runs on such a device; 0: none.
int best_cubin_for(const std::vector<std::string>& build_archs, int cc_major, int cc_minor) {
  return best_arch_for(build_archs, "-virtual", cubin_runs_on, cc_major, cc_minor);
}

}  // namespace

int code_arch_for(const std::vector<std::string>& build_archs, int cc_major, int cc_minor) {
  if (const int cubin = best_cubin_for(build_archs, cc_major, cc_minor); cubin != 0) return cubin;
  return best_arch_for(build_archs, "-real", ptx_runs_on, cc_major, cc_minor);
}

ProbeResult probe() {
  ProbeResult result;
  result.version = MXMOE_VERSION;
  const std::vector<std::string> archs = build_archs();
  result.compiled_archs = compiled_archs();
  result.cpu_backends = {"reference"};
  cudaDriverGetVersion(&result.driver_version);
  cudaRuntimeGetVersion(&result.runtime_version);
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    // "no NVIDIA GPU or driver found" where that is the cause (common/cuda_check.hpp).
    result.no_gpu_reason = err != cudaSuccess ? detail::describe_cuda_error(err)
                                              : std::string("no NVIDIA GPU or driver found (no CUDA device)");
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return result;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    GpuInfo gpu;
    gpu.index = i;
    gpu.name = prop.name;
    gpu.cc_major = prop.major;
    gpu.cc_minor = prop.minor;
    gpu.sm_count = prop.multiProcessorCount;
    gpu.total_memory = prop.totalGlobalMem;
    gpu.l2_bytes = static_cast<size_t>(prop.l2CacheSize);
    gpu.smem_per_block_optin = prop.sharedMemPerBlockOptin;
    gpu.best_target = best_target_for(prop.major, prop.minor);
    gpu.family_target = family_target_for(prop.major, prop.minor);
    gpu.has_native_kernels = best_cubin_for(archs, prop.major, prop.minor) != 0;
    gpu.code_arch = code_arch_for(archs, prop.major, prop.minor);
    gpu.runs_by_jit = !gpu.has_native_kernels && gpu.code_arch != 0;
    // The backends `mxmoe check` runs by default: those a GPU run has held to their tolerance.
    // mx-emulated needs the FP8 mma.sync (SM89+ code; validated on an H200). mx (SM12x) can be asked for
    // by name but is left out until it has run on an SM120/SM121 GPU.
    if (gpu.code_arch != 0) {
      gpu.runnable_backends = {"auto", "gemv", "mma"};
      if (gpu.code_arch >= 89) gpu.runnable_backends.push_back("mx-emulated");
    }
    result.gpus.push_back(std::move(gpu));
  }
  if (result.gpus.empty()) result.no_gpu_reason = "no CUDA device could be queried";
  else if (std::none_of(result.gpus.begin(), result.gpus.end(), [](const GpuInfo& g) { return g.code_arch != 0; }))
    result.no_gpu_reason = "this build has no kernels for the GPU present (build for its target, e.g. " +
                           result.gpus[0].best_target +
                           (result.gpus[0].family_target.empty() ? "" : " or " + result.gpus[0].family_target) + ")";
  return result;
}

bool gpu_available() {
  static const bool available = [] {
    const ProbeResult r = probe();
    return !r.gpus.empty() && r.gpus[0].code_arch != 0;
  }();
  return available;
}

std::string probe_to_json(const ProbeResult& r) {
  nlohmann::ordered_json j;
  j["version"] = r.version;
  j["compiled_archs"] = r.compiled_archs;
  j["cuda_driver_version"] = r.driver_version;
  j["cuda_runtime_version"] = r.runtime_version;
  j["gpu_available"] = r.no_gpu_reason.empty();
  if (!r.no_gpu_reason.empty()) j["no_gpu_reason"] = r.no_gpu_reason;
  j["cpu_backends"] = r.cpu_backends;
  j["gpus"] = nlohmann::json::array();
  for (const auto& g : r.gpus) {
    nlohmann::ordered_json gj;
    gj["index"] = g.index;
    gj["name"] = g.name;
    gj["compute_capability"] = std::to_string(g.cc_major) + "." + std::to_string(g.cc_minor);
    gj["best_target"] = g.best_target;
    if (!g.family_target.empty()) gj["family_target"] = g.family_target;
    gj["sm_count"] = g.sm_count;
    gj["memory_bytes"] = g.total_memory;
    gj["l2_bytes"] = g.l2_bytes;
    gj["smem_per_block_optin"] = g.smem_per_block_optin;
    gj["has_native_kernels"] = g.has_native_kernels;
    gj["runs_by_jit"] = g.runs_by_jit;
    gj["code_arch"] = g.code_arch;
    gj["runnable_backends"] = g.runnable_backends;
    if (!g.mx_self_test.empty()) gj["mx_self_test"] = g.mx_self_test;
    j["gpus"].push_back(gj);
  }
  return j.dump(2);
}

std::string probe_to_text(const ProbeResult& r) {
  std::ostringstream os;
  auto version = [](int v) { return v ? std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10) : "none"; };
  os << "mxmoe " << r.version << "\n";
  os << "compiled archs: ";
  for (size_t i = 0; i < r.compiled_archs.size(); ++i) os << (i ? ", " : "") << r.compiled_archs[i];
  os << "\nCUDA driver: " << version(r.driver_version) << ", runtime: " << version(r.runtime_version) << "\n";
  os << "CPU backends: reference\n";
  if (!r.no_gpu_reason.empty()) os << "GPU: none usable (" << r.no_gpu_reason << ")\n";
  for (const auto& g : r.gpus) {
    os << "GPU " << g.index << ": " << g.name << ", compute capability " << g.cc_major << "." << g.cc_minor
       << " (build for " << g.best_target
       << (g.family_target.empty() ? std::string() : ", or " + g.family_target + " for every GPU of its family") << "), "
       << g.sm_count << " SMs, " << (g.total_memory >> 20) << " MiB, L2 "
       << (g.l2_bytes >> 20) << " MiB\n";
    if (g.runs_by_jit)
      os << "  runs sm_" << g.code_arch << " code: PTX the driver compiles at first use (no cubin of this build runs here)\n";
    os << "  backends: ";
    for (size_t i = 0; i < g.runnable_backends.size(); ++i) os << (i ? ", " : "") << g.runnable_backends[i];
    os << (g.runnable_backends.empty() ? "none (no kernels of this build run here)" : "") << "\n";
    if (!g.mx_self_test.empty()) os << "  MX self-test: " << g.mx_self_test << "\n";
  }
  return os.str();
}

}  // namespace mxmoe
