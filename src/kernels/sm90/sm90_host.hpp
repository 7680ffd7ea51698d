#pragma once
// Host steps the two Hopper wgmma families share (wgmma_gemm_kernel.cu, wgmma_fp8_gemm_kernel.cu): the
// table rows' check against the kernels' shapes, a tile row's dynamic shared memory, whether a device
// runs sm_90a tiles, and the kernels' attributes.
#include <cuda_runtime.h>

#include <cstddef>

#include "common/cuda_check.hpp"
#include "kernels/common/static_smem.hpp"
#include "kernels/sm90/wgmma_gemm.hpp"
#include "kernels/tile_table.hpp"
#include "layout/gemv_layout.hpp"
#include "mxmoe/error.hpp"

namespace mxmoe::sm90 {

// The table row's dynamic shared memory (`what` names the family in the error for a missing row).
inline size_t row_smem_bytes(kernels::TileFamily family, int rows, const char* what) {
  const int row = kernels::find_row(family, rows);
  MXMOE_REQUIRE(row >= 0, what, ": no tile has ", rows, " rows");
  return static_cast<size_t>(kernels::kTileTable[row].smem_bytes);
}

// The tile table's rows of a wgmma family are its kernels' shapes (Shape<rows>: kWarps, kStages,
// kSmemBytes): the block of the shape's warps with a 16-row weight tile each, K in chunks, the ring's
// stages and bytes, sm_90a only.
template <kernels::TileFamily kFamily, template <int> class Shape>
constexpr bool rows_are_kernels() {
  return kernels::all_rows_of<kFamily>([](auto i) {
    constexpr kernels::TileRow r = kernels::kRowOf<decltype(i)>;
    using S = Shape<r.rows>;
    static_assert(r.warps == S::kWarps && r.weight_rows == r.warps * gemv::kTileRows &&
                      r.k_chunk == gemv::kChunkK,
                  "a wgmma row: its shape's warps, one 16-row weight tile each, K in chunks");
    static_assert(r.stages == S::kStages && r.smem_bytes == S::kSmemBytes, "a wgmma row's ring is its shape's");
    static_assert(r.archs == kernels::kArchSm90a, "wgmma runs on sm_90a only");
    return true;
  });
}

// Whether `device` runs the variants (for_each_variant(f) calls f(kernel, rows)) of a wgmma family: an
// sm_90a device (compute capability 9.0; the table's rows run nowhere else) whose opt-in shared memory
// holds each variant's dynamic bytes (smem_bytes(rows)) next to its static ones.
template <class ForEachVariant, class SmemBytes>
bool variants_run_on(int device, ForEachVariant&& for_each_variant, SmemBytes&& smem_bytes) {
  int major = 0, minor = 0, optin = 0;
  MXMOE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  MXMOE_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  MXMOE_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if ((kernels::arch_of(major, minor) & kernels::kArchSm90a) == 0) return false;
  return kernels::variants_fit(for_each_variant, smem_bytes, static_cast<size_t>(optin));
}

// Lets each variant use its dynamic shared memory, with all of the unified L1 as shared memory: without
// the hint the driver may keep a smaller split that a previous kernel left, which fits one block of the
// 32- and 64-row tiles instead of two (on an H100, gpt-oss-120b T = 1024 took 914 us after the GEMV sizes
// in one process, 848 without them).
template <class ForEachVariant, class SmemBytes>
void allow_dynamic_smem(ForEachVariant&& for_each_variant, SmemBytes&& smem_bytes) {
  for_each_variant([&](auto kernel, int rows) {
    MXMOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem_bytes(rows))));
    MXMOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                          cudaSharedmemCarveoutMaxShared));
  });
}

}  // namespace mxmoe::sm90
