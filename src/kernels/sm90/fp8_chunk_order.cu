// quantize_tokens_e4m3 (fp8_chunk_order.hpp): one block per token, so a row's loads are two or three per
// thread and in flight together. Pass 1 finds the row's amax (and whether it holds a NaN or inf) across
// the block; pass 2 reads the row again (from L1) and writes each group of 8 elements (one word of one MX
// block: elements 32q + 8w .. + 7) as two 4-byte words at 32w + 4q and 32w + 16 + 4q of its chunk's line,
// in each of the token's top_k sorted rows (its codes and scale are computed once for all of them).
#include "kernels/sm90/fp8_chunk_order.hpp"

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "common/cuda_check.hpp"
#include "common/pdl_launch.cuh"
#include "mxmoe/config.hpp"

namespace mxmoe::sm90 {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
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

// Token `row` of `in` to its sorted rows pair_row[row * top_k + j] that are not -1.
__global__ void __launch_bounds__(kThreads)
    quantize_kernel(const uint16_t* in, int64_t in_pitch, uint8_t* out, float* scales, int64_t rows, int k,
                    int64_t out_pitch, const int32_t* pair_row, int top_k) {
  __shared__ float warp_amax[kWarps];
  kernels::pdl_wait();  // `in` and `pair_row` may come from the predecessors
  kernels::pdl_trigger();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int groups = static_cast<int>(out_pitch / 8);  // whole chunks: the padding's groups are written too
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const uint4* src = reinterpret_cast<const uint4*>(in + row * in_pitch);
    float amax = 0.f;
    bool finite = true;
    for (int i = threadIdx.x; i < k / 8; i += kThreads) {
      float x[8];
      unpack_bf16x8(src[i], x);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        finite = finite && isfinite(x[j]);
        amax = fmaxf(amax, fabsf(x[j]));
      }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, off));
    if (lane == 0) warp_amax[warp] = amax;
    finite = !__syncthreads_or(!finite);  // also orders warp_amax's stores before the loads below
#pragma unroll
    for (int w = 0; w < kWarps; ++w) amax = fmaxf(amax, warp_amax[w]);
    // As fp8::row_round_trip: the scale amax / 448 (IEEE division), x / scale rounded by float_to_e4m3.
    const float scale = finite ? amax / kE4m3Max : __int_as_float(0x7FC00000);
    // The token's sorted rows (their entries stay in L1 after the first group).
    const int32_t* dests = pair_row + row * top_k;
    if (threadIdx.x == 0)
      for (int j = 0; j < top_k; ++j)
        if (const int32_t r = dests[j]; r >= 0) scales[r] = scale;
    for (int i = threadIdx.x; i < groups; i += kThreads) {
      uint32_t a = 0, b = 0;  // bytes [e0, e3, e1, e2] and [e4, e7, e5, e6] of the group (fp8_chunk_order.hpp)
      if (!finite) {
        a = b = i * 8 < k ? 0x7F7F7F7Fu : 0u;
      } else if (i * 8 < k && scale != 0.f) {
        float x[8];
        unpack_bf16x8(src[i], x);
        uint32_t c[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) c[j] = e4m3_code(x[j] / scale);
        a = c[0] | c[3] << 8 | c[1] << 16 | c[2] << 24;
        b = c[4] | c[7] << 8 | c[5] << 16 | c[6] << 24;
      }
      const int chunk = i >> 4, q = (i >> 2) & 3, w = i & 3;
      const int at = chunk * gemv::kChunkK + 32 * w + 4 * q;
      for (int j = 0; j < top_k; ++j) {
        const int64_t r = dests[j];
        if (r < 0) continue;  // a dropped pair
        uint8_t* line = out + r * out_pitch + at;
        *reinterpret_cast<uint32_t*>(line) = a;
        *reinterpret_cast<uint32_t*>(line + 16) = b;
      }
    }
    __syncthreads();  // warp_amax is rewritten by the next row
  }
}

}  // namespace

void quantize_tokens_e4m3(const uint16_t* in, int64_t in_pitch, uint8_t* out, float* scales, int64_t tokens, int k,
                          const int32_t* pair_row, int top_k, cudaStream_t stream) {
  constexpr const char* what = "quantize_tokens_e4m3";
  MXMOE_REQUIRE(k > 0 && k % 8 == 0, what, ": k must be a positive multiple of 8, got ", k);
  MXMOE_REQUIRE(in_pitch >= k && in_pitch % 8 == 0, what, ": in_pitch must be a multiple of 8 of at least k (", k,
                "), got ", in_pitch);
  MXMOE_REQUIRE(tokens >= 0, what, ": tokens must not be negative, got ", tokens);
  MXMOE_REQUIRE(reinterpret_cast<uintptr_t>(in) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0, what,
                ": in and out must be 16-byte aligned");
  MXMOE_REQUIRE(top_k > 0 && top_k <= kMaxTopk, what, ": top_k must be 1 to ", kMaxTopk, ", got ", top_k);
  MXMOE_REQUIRE(pair_row != nullptr || tokens == 0, what, ": pair_row is required");
  if (tokens == 0) return;
  const int blocks = static_cast<int>(std::min<int64_t>(tokens, 16384));
  kernels::launch_with_pdl(quantize_kernel, dim3(blocks), dim3(kThreads), 0, stream, in, in_pitch, out, scales, tokens,
                           k, padded_k(k), pair_row, top_k);
}

}  // namespace mxmoe::sm90
