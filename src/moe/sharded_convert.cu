// fp32 -> bf16 of the summed partial outputs (sharded_convert.hpp), four elements per thread.
#include <algorithm>

#include "common/bf16_pack.cuh"
#include "common/cuda_check.hpp"
#include "moe/sharded_convert.hpp"

namespace mxmoe::sharded {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) f32_to_bf16_kernel(const float4* __restrict__ in, uint2* __restrict__ out,
                                                               size_t quads) {
  for (size_t i = blockIdx.x * size_t{kThreads} + threadIdx.x; i < quads; i += size_t{gridDim.x} * kThreads)
    out[i] = kernels::pack_bf16x4(in[i]);
}

}  // namespace

void f32_to_bf16(const float* in, uint16_t* out, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  const size_t quads = n / 4;
  const auto blocks = static_cast<unsigned>(std::min<size_t>((quads + kThreads - 1) / kThreads, 4096));
  f32_to_bf16_kernel<<<blocks, kThreads, 0, stream>>>(reinterpret_cast<const float4*>(in),
                                                      reinterpret_cast<uint2*>(out), quads);
  MXMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace mxmoe::sharded
