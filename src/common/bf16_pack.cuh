#pragma once
// Four fp32 values -> four bf16 (round to nearest even) in 8 bytes, element order kept: the combine's
// store (routing/combine.cu and the GEMV GEMM2's fused combine, which must give the same bits).
#include <cuda_bf16.h>

#include <cstdint>

namespace mxmoe::kernels {

__device__ __forceinline__ uint2 pack_bf16x4(float4 v) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y);
  const __nv_bfloat162 hi = __floats2bfloat162_rn(v.z, v.w);
  uint2 packed;
  packed.x = *reinterpret_cast<const uint32_t*>(&lo);
  packed.y = *reinterpret_cast<const uint32_t*>(&hi);
  return packed;
}

}  // namespace mxmoe::kernels
