#pragma once
// A Plan: everything one forward runs, decided by the planner (planner.hpp) and executed by the
// runner as it is. Kernels receive its fields as plain parameters and decide nothing.
#include <cstdint>
#include <string>

#include "mxmoe/runner.hpp"

namespace mxmoe::plan {

enum class Family {
  Gemv,   // the GEMV family (W4A16, weights streamed once per batch of 8 or 16 rows of an expert)
  Mma,    // the warp-level tensor-core family (W4A16, Bf16Atom): plain or swap-AB tiles
  Wgmma,  // Hopper's wgmma tiles (W4A16, sm_90a)
  Mx,     // the block-scaled path (MXFP8 activations, emulated or native MX atom)
  WgmmaFp8,  // Hopper's W4A8 wgmma tiles (Precision::Fp8, sm_90a): e4m3 tokens (a scale each), GEMM2's
             // input e4m3 at a static scale
};
const char* to_string(Family family);

struct Plan {
  Backend backend = Backend::Auto;
  int64_t tokens = 0;
  int max_active = 0;            // expert slots: min(E, T * k)
  Family family = Family::Gemv;
  bool from_tune_table = false;  // the tile came from a bench --tune table
  // Gemv: rows per weight pass, ring stages, split-K of GEMM1 and GEMM2 (8-row batches; 1 otherwise),
  // the tokens routed inside both GEMMs (no route kernel), GEMM2 doing the combine (through a cluster
  // of the slots, or a count in L2), GEMM2 started per slot as GEMM1's blocks for it end.
  int batch_rows = 8;
  int stages = 2;
  int ksplit1 = 1, ksplit2 = 1;
  bool local_route = false, fused_combine = false, cluster_combine = false, counted = false;
  // WgmmaFp8 uses ksplit1 / ksplit2 too: the blocks of a cluster that share each tile set's K.
  // Mma, Wgmma and WgmmaFp8: the tile's m16 tiles (rows of one expert per block: 16 * m_tiles) and form.
  int m_tiles = 4;
  bool swap_ab = false;
  // Mx: the native atom (else the emulated one); GEMM1 writing fp32 rows and a second expand (else
  // its MXFP8 epilogue writes GEMM2's input).
  bool mx_native = false, mx_expand_intermediate = false;
  // The self-test's planted wrong atom (moe/mx_self_test.hpp): set by its test of the gate only, never planned.
  bool mx_planted_fault = false;

  // The plan in words, e.g. "wgmma bf16 256x64x128 tiles (sm_90a), both gemms".
  std::string to_string() const;
  bool operator==(const Plan&) const = default;
};

}  // namespace mxmoe::plan
