// quantize_rows_e4m3 (fp8_chunk_order.hpp): one warp per row. Pass 1 finds the row's amax (and whether
// it holds a NaN or inf); pass 2 reads the row again (from L1/L2) and writes each group of 8 elements
// (one word of one MX block: elements 32q + 8w .. + 7) as two 4-byte words at 32w + 4q and 32w + 16 + 4q
// of its chunk's line.
#include "kernels/sm90/fp8_chunk_order.hpp"

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "common/cuda_check.hpp"
#include "common/pdl_launch.cuh"

namespace mxmoe::sm90 {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;
constexpr float kE4m3Max = 448.f;

__device__ __forceinline__ void unpack_bf16x8(const uint4 v, float (&x)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    x[2 * i] = __uint_as_float(w[i] << 16);
    x[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
  }
}

__device__ __forceinline__ uint32_t e4m3_code(float v) {
  return static_cast<uint32_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

__global__ void __launch_bounds__(kThreads)
    quantize_rows_kernel(const uint16_t* in, int64_t in_pitch, uint8_t* out, float* scales, int64_t rows, int k,
                         int64_t out_pitch, const int32_t* row_pair, int top_k, const int32_t* live_rows) {
  cudaGridDependencySynchronize();  // `in` and `row_pair` may come from the predecessors
  cudaTriggerProgrammaticLaunchCompletion();
  if (live_rows != nullptr) rows = min(rows, int64_t{*live_rows});
  const int lane = threadIdx.x & 31;
  const int groups = static_cast<int>(out_pitch / 8);  // whole chunks: the padding's groups are written too
  const int64_t warps = int64_t{gridDim.x} * kWarpsPerBlock;
  for (int64_t row = blockIdx.x * int64_t{kWarpsPerBlock} + (threadIdx.x >> 5); row < rows; row += warps) {
    const int64_t source = row_pair ? row_pair[row] / top_k : row;
    const uint4* src = reinterpret_cast<const uint4*>(in + source * in_pitch);
    float amax = 0.f;
    bool finite = true;
    for (int i = lane; i < k / 8; i += 32) {
      float x[8];
      unpack_bf16x8(__ldcg(src + i), x);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        finite = finite && isfinite(x[j]);
        amax = fmaxf(amax, fabsf(x[j]));
      }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, off));
    finite = __all_sync(0xFFFFFFFFu, finite);
    // As fp8::row_round_trip: the scale amax / 448 (IEEE division), x / scale rounded by float_to_e4m3.
    const float scale = finite ? amax / kE4m3Max : __int_as_float(0x7FC00000);
    if (lane == 0) scales[row] = scale;
    uint8_t* dst = out + row * out_pitch;
    for (int i = lane; i < groups; i += 32) {
      uint32_t a = 0, b = 0;  // bytes [e0, e3, e1, e2] and [e4, e7, e5, e6] of the group (fp8_chunk_order.hpp)
      if (!finite) {
        a = b = i * 8 < k ? 0x7F7F7F7Fu : 0u;
      } else if (i * 8 < k && scale != 0.f) {
        float x[8];
        unpack_bf16x8(__ldcg(src + i), x);
        uint32_t c[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) c[j] = e4m3_code(x[j] / scale);
        a = c[0] | c[3] << 8 | c[1] << 16 | c[2] << 24;
        b = c[4] | c[7] << 8 | c[5] << 16 | c[6] << 24;
      }
      const int chunk = i >> 4, q = (i >> 2) & 3, w = i & 3;
      uint8_t* line = dst + chunk * gemv::kChunkK + 32 * w + 4 * q;
      *reinterpret_cast<uint32_t*>(line) = a;
      *reinterpret_cast<uint32_t*>(line + 16) = b;
    }
  }
}

}  // namespace

void quantize_rows_e4m3(const uint16_t* in, int64_t in_pitch, uint8_t* out, float* scales, int64_t rows, int k,
                        cudaStream_t stream, const int32_t* row_pair, int top_k, const int32_t* live_rows) {
  MXMOE_REQUIRE(k > 0 && k % 8 == 0, "quantize_rows_e4m3: k must be a positive multiple of 8, got ", k);
  MXMOE_REQUIRE(in_pitch >= k && in_pitch % 8 == 0, "quantize_rows_e4m3: in_pitch must be a multiple of 8 of at least k (",
                k, "), got ", in_pitch);
  MXMOE_REQUIRE(top_k > 0, "quantize_rows_e4m3: top_k must be positive, got ", top_k);
  MXMOE_REQUIRE(rows >= 0, "quantize_rows_e4m3: rows must not be negative, got ", rows);
  MXMOE_REQUIRE(reinterpret_cast<uintptr_t>(in) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0,
                "quantize_rows_e4m3: in and out must be 16-byte aligned");
  if (rows == 0) return;
  const int blocks = static_cast<int>(std::min<int64_t>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock, 4096));
  kernels::launch_with_pdl(quantize_rows_kernel, dim3(blocks), dim3(kThreads), 0, stream, in, in_pitch, out, scales,
                           rows, k, padded_k(k), row_pair, top_k, live_rows);
}

}  // namespace mxmoe::sm90
