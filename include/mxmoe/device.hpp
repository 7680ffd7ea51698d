#pragma once
// What this build was compiled for and what the machine has: the capability probe.
#include <string>
#include <vector>

namespace mxmoe {

struct GpuInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  size_t total_memory = 0;
  size_t l2_bytes = 0;
  size_t smem_per_block_optin = 0;
  std::string best_target;                   // e.g. "sm_121a" for a GB10: the arch-specific target
  std::string family_target;                 // e.g. "sm_120f" for any SM12x GPU; empty where none serves
  bool has_native_kernels = false;           // a cubin of this build runs on it without JIT
  // The code it runs, as compute capability x 10 (80, 89, 90, 120, ...): the best cubin that runs on it,
  // else the newest PTX the driver compiles for it at first use (runs_by_jit); 0: none (not usable).
  int code_arch = 0;
  bool runs_by_jit = false;
  std::vector<std::string> runnable_backends;  // validated here; `mxmoe check` runs these by default
  // The MX self-test's line (mx_self_test_report): filled by `mxmoe probe`, empty from probe(), which
  // launches nothing.
  std::string mx_self_test;
};

struct ProbeResult {
  std::string version;
  std::vector<std::string> compiled_archs;  // e.g. {"sm_90a", "sm_120a", "sm_121a"}
  int driver_version = 0;                   // 0: no driver
  int runtime_version = 0;
  std::string no_gpu_reason;                // non-empty when no GPU can be used
  std::vector<GpuInfo> gpus;
  std::vector<std::string> cpu_backends;    // {"reference"}
};

ProbeResult probe();
std::string probe_to_json(const ProbeResult& result);
std::string probe_to_text(const ProbeResult& result);

// "90a" / "sm_90a" / "120f" -> canonical "sm_90a". Throws on junk.
std::string canonical_arch(const std::string& arch);
// The architecture-specific target for a device: cc 12.1 -> "sm_121a", 9.0 -> "sm_90a", 8.6 -> "sm_86".
std::string best_target_for(int cc_major, int cc_minor);
// The family-specific target that has every instruction mxmoe needs on the device, or "" where none
// does: cc 12.x -> "sm_120f" (one cubin for RTX 50xx, RTX PRO 6000 and GB10, with the block-scaled
// MMA); 9.0 -> "" (wgmma exists only in sm_90a).
std::string family_target_for(int cc_major, int cc_minor);
// Whether SASS compiled for `arch` runs on a device of compute capability major.minor:
// plain sm_XY runs on the same major with minor >= Y; sm_XYa only on exactly X.Y;
// sm_XYf on the same family (same major, minor >= Y).
bool cubin_runs_on(const std::string& arch, int cc_major, int cc_minor);
// Whether PTX compiled for `arch` is JIT-compiled for such a device: plain compute_XY on any compute
// capability from X.Y up; `a` and `f` PTX where their cubins run.
bool ptx_runs_on(const std::string& arch, int cc_major, int cc_minor);
// The code a device runs from a build for `build_archs` (CMAKE_CUDA_ARCHITECTURES entries: "80",
// "90a-real", "80-virtual"), as GpuInfo::code_arch says; 0 when none of it runs there.
int code_arch_for(const std::vector<std::string>& build_archs, int cc_major, int cc_minor);

// True when at least one usable CUDA device is present (cached).
bool gpu_available();

// The block-scaled (MXFP8) path's self-test on GPU `device`: the native atom on SM120/SM121, the
// emulated one elsewhere, run once per process (the result the runner's gate uses): "passed (...)",
// "FAILED (...)" or "not run (...)". Launches a small layer on that device; `mxmoe probe` prints it.
std::string mx_self_test_report(int device);

}  // namespace mxmoe
