// combine: each token's k expert rows (fp32, or bf16 from the swap-AB and wgmma tiles) summed in slot order
// in fp32 (bitwise reproducible), bf16 out; a dropped pair (pair_row -1) adds nothing.
#include <cuda_bf16.h>

#include "common/bf16_pack.cuh"
#include "common/pdl_launch.cuh"
#include "common/cuda_check.hpp"
#include "routing/routing.hpp"

namespace mxmoe::routing {
namespace {

constexpr int kThreads = 256;

// Four consecutive elements of a row as fp32.
__device__ __forceinline__ float4 load4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ float4 load4(const uint16_t* p) {
  const uint2 v = *reinterpret_cast<const uint2*>(p);
  return make_float4(__uint_as_float(v.x << 16), __uint_as_float(v.x & 0xFFFF0000u), __uint_as_float(v.y << 16),
                     __uint_as_float(v.y & 0xFFFF0000u));
}

// Four sums into the output: bf16 (rounded to nearest even), or fp32 as they are.
__device__ __forceinline__ void store4(uint16_t* p, float4 v) {
  *reinterpret_cast<uint2*>(p) = kernels::pack_bf16x4(v);
}
__device__ __forceinline__ void store4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }

template <class Row, class Out>
__global__ void __launch_bounds__(kThreads) combine_kernel(const Row* __restrict__ rows,
                                                           const int32_t* __restrict__ pair_row, int top_k,
                                                           int hidden, Out* __restrict__ out) {
  // Programmatic dependent launch (docs/gpu-pipeline.md): wait for GEMM2, then let the next kernel launch.
  kernels::pdl_wait();
  kernels::pdl_trigger();
  const int64_t t = blockIdx.x;
  const int n = (blockIdx.y * kThreads + threadIdx.x) * 4;
  if (n >= hidden) return;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int s = 0; s < top_k; ++s) {
    const int64_t row = pair_row[t * top_k + s];
    if (row < 0) continue;  // a dropped pair (routed_pairs.cuh)
    const float4 v = load4(rows + row * hidden + n);
    acc.x += v.x;
    acc.y += v.y;
    acc.z += v.z;
    acc.w += v.w;
  }
  store4(out + t * hidden + n, acc);
}

template <class Row, class Out>
void launch_combine(const Row* rows, const int32_t* pair_row, int64_t tokens, int top_k, int hidden, Out* out,
                    cudaStream_t stream) {
  if (tokens == 0) return;
  MXMOE_REQUIRE(hidden % 4 == 0, "combine: hidden must be a multiple of 4, got ", hidden);
  const dim3 grid(static_cast<unsigned>(tokens), (hidden / 4 + kThreads - 1) / kThreads);
  kernels::launch_with_pdl(combine_kernel<Row, Out>, grid, dim3(kThreads), 0, stream, rows, pair_row, top_k, hidden,
                           out);
}

}  // namespace

void combine_rows(const float* rows, const int32_t* pair_row, int64_t tokens, int top_k, int hidden, uint16_t* out,
                  cudaStream_t stream) {
  launch_combine(rows, pair_row, tokens, top_k, hidden, out, stream);
}

void combine_bf16_rows(const uint16_t* rows, const int32_t* pair_row, int64_t tokens, int top_k, int hidden,
                       uint16_t* out, cudaStream_t stream) {
  launch_combine(rows, pair_row, tokens, top_k, hidden, out, stream);
}

void combine_rows(const float* rows, const int32_t* pair_row, int64_t tokens, int top_k, int hidden, float* out,
                  cudaStream_t stream) {
  launch_combine(rows, pair_row, tokens, top_k, hidden, out, stream);
}

void combine_bf16_rows(const uint16_t* rows, const int32_t* pair_row, int64_t tokens, int top_k, int hidden,
                       float* out, cudaStream_t stream) {
  launch_combine(rows, pair_row, tokens, top_k, hidden, out, stream);
}

}  // namespace mxmoe::routing
