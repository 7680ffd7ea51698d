// tensor_map.hpp: cuTensorMapEncodeTiled through cudaGetDriverEntryPointByVersion.
#include "kernels/common/tensor_map.hpp"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include "common/cuda_check.hpp"

namespace mxmoe::kernels {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_function() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult status{};
    MXMOE_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &status));
    MXMOE_REQUIRE(status == cudaDriverEntryPointSuccess && p != nullptr,
                  "tensor maps: the driver has no cuTensorMapEncodeTiled (status ", static_cast<int>(status), ")");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

}  // namespace

CUtensorMap encode_tiled_map(const char* what, CUtensorMapDataType type, const void* base,
                             std::span<const uint64_t> dims, std::span<const uint64_t> strides,
                             std::span<const uint32_t> box, CUtensorMapSwizzle swizzle) {
  const size_t rank = dims.size();
  MXMOE_REQUIRE(rank >= 1 && rank <= 5 && strides.size() == rank - 1 && box.size() == rank, "tensor map ", what,
                ": rank ", rank, " with ", strides.size(), " strides and ", box.size(), " box extents");
  MXMOE_REQUIRE(reinterpret_cast<uintptr_t>(base) % 16 == 0, "tensor map ", what, ": base address not 16-byte aligned");
  for (size_t i = 0; i < rank; ++i) {
    MXMOE_REQUIRE(dims[i] >= 1 && dims[i] <= (uint64_t{1} << 32), "tensor map ", what, ": extent ", i, " is ", dims[i]);
    MXMOE_REQUIRE(box[i] >= 1 && box[i] <= 256, "tensor map ", what, ": box extent ", i, " is ", box[i]);
  }
  for (size_t i = 0; i + 1 < rank; ++i)
    MXMOE_REQUIRE(strides[i] % 16 == 0 && strides[i] < (uint64_t{1} << 40), "tensor map ", what, ": stride ", i,
                  " is ", strides[i], " bytes");
  cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  CUtensorMap map{};
  const CUresult r = encode_function()(&map, type, static_cast<cuuint32_t>(rank), const_cast<void*>(base), dims.data(),
                                       strides.data(), box.data(), element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                       swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  MXMOE_REQUIRE(r == CUDA_SUCCESS, "tensor map ", what, ": cuTensorMapEncodeTiled failed (CUresult ", static_cast<int>(r),
                ")");
  return map;
}

}  // namespace mxmoe::kernels
