// The measured ceilings of `mxmoe bench` (bench_ceilings.hpp).
#include "bench_ceilings.hpp"

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "bench_timing.hpp"
#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "mxmoe/error.hpp"

namespace mxmoe::cli::bench {
namespace {

__global__ void copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    dst[i] = src[i];
}

__global__ void fill_random_bf16(__nv_bfloat16* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    p[i] = __float2bfloat16((x & 0xFFFF) / 65536.f - 0.5f);
  }
}

}  // namespace

Ceiling measure_copy(cudaStream_t stream, int sm_count, double warmup_ms, GpuMonitor& monitor) {
  const size_t bytes = size_t{1} << 30;
  DeviceBuffer a(bytes), b(bytes);
  MXMOE_CUDA_CHECK(cudaMemset(a.get(), 1, bytes));
  const Timing t = time_graph(stream, {3, warmup_ms}, 20, monitor, [&] {
    copy_kernel<<<sm_count * 8, 512, 0, stream>>>(a.get<uint4>(), b.get<uint4>(), bytes / 16);
    MXMOE_CUDA_CHECK_LAUNCH();
  });
  return {2.0 * bytes / (t.ms * 1e-3) / 1e9, t.gpu};
}

Ceiling measure_bf16(cudaStream_t stream, double warmup_ms, GpuMonitor& monitor) {
  const int n = 8192;
  const size_t count = size_t{n} * n;
  DeviceBuffer a(count * 2), b(count * 2), c(count * 2);
  fill_random_bf16<<<1024, 256, 0, stream>>>(a.get<__nv_bfloat16>(), count, 1);
  fill_random_bf16<<<1024, 256, 0, stream>>>(b.get<__nv_bfloat16>(), count, 2);
  MXMOE_CUDA_CHECK_LAUNCH();
  cublasHandle_t handle;
  MXMOE_REQUIRE(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS, "cublasCreate failed");
  cublasSetStream(handle, stream);
  const float alpha = 1.f, beta = 0.f;
  auto gemm = [&] {
    const cublasStatus_t st = cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a.get(), CUDA_R_16BF, n,
                                           b.get(), CUDA_R_16BF, n, &beta, c.get(), CUDA_R_16BF, n,
                                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    MXMOE_REQUIRE(st == CUBLAS_STATUS_SUCCESS, "cublasGemmEx failed: ", static_cast<int>(st));
  };
  gemm();  // cuBLAS picks and loads its kernel outside the capture
  MXMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  const Timing t = time_graph(stream, {3, warmup_ms}, 20, monitor, gemm);
  cublasDestroy(handle);
  return {2.0 * n * n * double(n) / (t.ms * 1e-3) / 1e12, t.gpu};
}

}  // namespace mxmoe::cli::bench
