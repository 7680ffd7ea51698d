#pragma once
// PlanOverride: the one way to force any part of the GPU planner's choice (for tests, `mxmoe bench
// --tune` and experiments), in RunnerOptions or as the string form MXMOE_PLAN, e.g.
//   MXMOE_PLAN="mma=swap32,ksplit=4"   MXMOE_PLAN="batch=16,stages=3,counted=0"
// Each field left empty means "the planner's choice". A forced tile applies when the forward runs that
// family: `mma=` when the tensor-core family runs (the `mma` backend, or `auto` where it picks it),
// `batch=`/`ksplit=`/... when the GEMV family runs. The runner checks every forced value against the
// build and the device when it is constructed (an Error names the key and the reason).
#include <optional>
#include <string>
#include <string_view>

namespace mxmoe {

// A tensor-core tile: its rows of one expert per block (16 * m16 tiles) and its form.
enum class MmaForm { Plain, SwapAb, Wgmma, WgmmaFp8 };  // WgmmaFp8: the W4A8 tiles (Precision::Fp8 only)
struct MmaTileChoice {
  int rows = 64;  // plain: 16, 32, 64; swap-AB: 16, 32, 64, 128; wgmma: 32, 64, 128; fp8 wgmma: 32, 64, 128, 192
  MmaForm form = MmaForm::Plain;
  bool operator==(const MmaTileChoice&) const = default;
};

struct PlanOverride {
  std::optional<MmaTileChoice> mma_tile;      // mma=16|32|64|swap16|...|wgmma128|fp8wgmma32|...|fp8wgmma192
  std::optional<bool> wgmma;                  // wgmma=0: never the wgmma tiles (1: allowed, the default)
  std::optional<int> gemv_batch_rows;         // batch=8|16: GEMV rows per weight pass
  std::optional<int> gemv_ksplit;             // ksplit=1|2|4|8: split-K of both GEMMs (GEMV 8-row batches; W4A8 wgmma clusters)
  std::optional<int> gemv_stages;             // stages=2|3: GEMV weight ring depth
  std::optional<bool> gemv_counted;           // counted=0|1: GEMV GEMM2 per slot as GEMM1 ends it
  std::optional<int> local_route_tokens;      // local_route=0..4: the largest T routed inside the GEMMs
  std::optional<int> fused_combine_tokens;    // fused_combine=0..8: the largest T whose GEMM2 combines
  std::optional<bool> cluster_combine;        // cluster_combine=0|1: GEMM2's combine through a cluster
  std::optional<bool> mx_expand_intermediate; // mx_expand=0|1: MX path, GEMM1 writes fp32 + a 2nd expand

  bool empty() const { return *this == PlanOverride{}; }
  bool operator==(const PlanOverride&) const = default;
};

// "key=value,key=value" (spaces around items ignored; "" is empty). An unknown key or value throws an
// Error naming `source` (e.g. "MXMOE_PLAN") and the key, and listing the valid keys or values.
PlanOverride parse_plan_override(std::string_view text, std::string_view source = "plan");
// The string form (parse_plan_override(to_string(o)) == o).
std::string to_string(const PlanOverride& o);
std::string to_string(const MmaTileChoice& tile);

}  // namespace mxmoe
