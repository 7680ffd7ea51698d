#pragma once
// The tensor-core family with MXFP8 activations (W4A8, block-scaled): the grouped GEMM of
// mma_gemm.hpp with an MX atom (mx_atoms.cuh). The activations come from the expand step
// (routing/expand.hpp): e4m3 codes and 128x4-swizzled scales, each expert's rows padded to 128. A
// block computes 64 of those rows against 256 weight rows in the GEMV layout, K in chunks of 128
// (the tile table's mx row, kernels/tile_table.hpp).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/common/grouped_args.hpp"

namespace mxmoe::mma {

// PlantedFault: the emulated atom with its scales exchanged (mx_atoms.cuh), for the self-test's own test.
enum class MxAtom { Emulated, Native, PlantedFault };

struct MxArgs : kernels::GroupedWeights, kernels::GroupedRouting {
  const uint8_t* codes = nullptr;    // expand: [padded rows, K] e4m3
  const uint8_t* scales = nullptr;   // expand: swizzled e8m0
  void* out = nullptr;               // GEMM1: fp32 [rows, I] (the expand quantises it); GEMM2: fp32 [rows, H]
  // GEMM1 only, when set: the MXFP8 epilogue. GEMM1 quantises its SwiGLU output itself and writes
  // GEMM2's input in the expand's layout (codes [padded rows, I], swizzled scales; padding rows and
  // k-blocks included), bit for bit what expanding the fp32 intermediate would give; `out` is unused.
  uint8_t* out_codes = nullptr;
  uint8_t* out_scales = nullptr;
  bool floor_rule = false;           // the epilogue's scale rule: FLOOR, else RCEIL
};

size_t mx_smem_bytes();
// Whether the atom's kernels can run on this device (emulated: SM89+; native: compute 12.x with the
// sm_120a/sm_121a cubin), and their shared-memory setting.
bool mx_supported(MxAtom atom, int cc_major, int cc_minor);
void mx_configure();

void launch_mx_gemm1(MxAtom atom, const MxArgs& args, int64_t tokens, int max_active, cudaStream_t stream);
void launch_mx_gemm2(MxAtom atom, const MxArgs& args, int64_t tokens, int max_active, cudaStream_t stream);

}  // namespace mxmoe::mma
