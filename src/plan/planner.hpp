#pragma once
// The planner: host-only, deterministic, the same on any machine for the same inputs. From a
// device's caps (or a named target's), the layer's shape, the backend, a PlanOverride and an optional
// bench --tune table, it decides every forward's Plan in three visible steps:
//   candidates  the families and tiles this build has that fit the caps (each one dropped says why);
//   cost        the measured preference table of the caps' kind (preferences.cpp, each row citing
//               its record), which a device's tune table overrides, and the GEMV split-K cost model;
//   compare     the preferred candidate for the forward's rows per expert, or the forced one.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "plan/tune_table.hpp"
#include "mxmoe/config.hpp"
#include "mxmoe/plan_override.hpp"
#include "mxmoe/runner.hpp"
#include "plan/device_caps.hpp"
#include "plan/plan.hpp"

namespace mxmoe::plan {

// Whether the build's tiles of a family fit the device (their shared memory next to their static
// part) and, for wgmma, run there. On a device: measured from the kernels' attributes; for a target:
// their dynamic bytes plus kStaticSmemAllowance (fits_for_caps).
struct Fits {
  bool mma = false;    // every register-decode and swap-AB tile
  bool wgmma = false;  // the wgmma tiles are built (sm_90a, full profile) and run on the caps
  bool mx = false;     // the MX tile
  bool wgmma_fp8 = false;  // the W4A8 wgmma tiles are built (sm_90a, full profile) and run on the caps
};
Fits fits_for_caps(const DeviceCaps& caps);

// What backend auto runs at `precision` on the caps: fp8 is the MXFP8 path on SM120/SM121 (mx) and on
// code with FP8 mma.sync but no wgmma, SM89 (mx-emulated: no block-scaled MMA there, so the MX scales are
// applied around a native FP8 mma.sync), and the W4A8 wgmma tiles on Hopper (auto). bf16: auto.
Backend auto_backend_for(Precision precision, const DeviceCaps& caps);

struct PlannerInput {
  DeviceCaps caps;
  Fits fits;
  MoeConfig config;
  Backend backend = Backend::Auto;  // Auto, Gemv, Mma, MxEmulated or Mx
  PlanOverride force;
  std::optional<TuneTable> tune;    // used only when it matches the caps' device and the shape
  // RunnerOptions::routed_experts: the experts the tokens are routed among when the layer holds only
  // config.num_experts of them (an expert-parallel rank); 0: config.num_experts.
  int routed_experts = 0;
  // RunnerOptions::precision: fp8 under a W4A16 backend (auto) plans the W4A8 wgmma tiles (Hopper).
  Precision precision = Precision::Bf16;
};

class Planner {
 public:
  // Validates the backend and every forced value against the caps and the build: an Error names the
  // backend or the MXMOE_PLAN key and the reason. Nothing is decided per forward here.
  explicit Planner(PlannerInput input);
  // The plan for T tokens (0 <= T).
  Plan plan(int64_t tokens) const;
  // What the candidate step dropped, and why (for `mxmoe plan`).
  const std::vector<std::string>& notes() const { return notes_; }
  const PlannerInput& input() const { return in_; }

 private:
  // The expected rows per active expert: the pairs routed to this layer's experts (T * k, or its share
  // of an expert-parallel layer's) over the experts they can reach.
  double rows_per_expert(int64_t tokens) const;
  bool uses_tensor_cores(double rows) const;
  void choose_tile(double rows, Plan& p) const;
  void choose_gemv(int64_t tokens, double rows, Plan& p) const;
  void choose_fp8_tile(int64_t tokens, double rows, Plan& p) const;

  PlannerInput in_;
  std::vector<std::string> notes_;
  int stages_ = 2;
  bool wide_batch_ok_ = false;     // the 16-row GEMV batch is built and fits
  bool wgmma_ok_ = false;          // the wgmma tiles may run
  bool cluster_combine_ = false;   // GEMV GEMM2's combine may go through a cluster
  int local_route_tokens_ = 0, fused_combine_tokens_ = 0;
};

// The GEMV split-K for a matrix of `tiles` 16-row tiles and `chunks` K chunks over `max_active` expert
// slots (8-row batches).
int choose_gemv_ksplit(const DeviceCaps& caps, int tiles, int chunks, int max_active);
// The W4A8 tiles' split-K for `tile_sets` blocks of the `rows`-row tile over `chunks` K chunks.
int choose_fp8_splits(const DeviceCaps& caps, int rows, int64_t tile_sets, int chunks);

}  // namespace mxmoe::plan
