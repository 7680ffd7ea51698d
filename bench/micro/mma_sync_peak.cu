// The ceiling of the tensor-core family's instruction: mma.sync m16n8k16 bf16 -> fp32 with no memory
// traffic at all (every warp runs 16 independent accumulator chains from registers), in TFLOP/s.
// The family's large-batch speed is judged against this, next to cuBLAS's bf16 rate (which uses
// wgmma on Hopper). Built with the tools (build*/bench/micro/mma_sync_peak), or by hand:
//   nvcc -O3 -arch=sm_90a -o mma_sync_peak bench/micro/mma_sync_peak.cu && ./mma_sync_peak
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "check.cuh"

constexpr int kChains = 16;
constexpr int kIters = 4096;

__global__ void mma_loop(float* sink, uint32_t seed) {
  float c[kChains][4] = {};
  uint32_t a0 = seed ^ threadIdx.x, a1 = a0 * 3u, a2 = a0 * 5u, a3 = a0 * 7u, b0 = a0 * 11u, b1 = a0 * 13u;
  // bf16 bit patterns of small normal numbers, so nothing overflows
  a0 = (a0 & 0x007F007Fu) | 0x3C003C00u, a1 = (a1 & 0x007F007Fu) | 0x3C003C00u;
  a2 = (a2 & 0x007F007Fu) | 0x3C003C00u, a3 = (a3 & 0x007F007Fu) | 0x3C003C00u;
  b0 = (b0 & 0x007F007Fu) | 0x3C003C00u, b1 = (b1 & 0x007F007Fu) | 0x3C003C00u;
  for (int it = 0; it < kIters; ++it) {
#pragma unroll
    for (int j = 0; j < kChains; ++j)
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
          "{%0,%1,%2,%3};\n"
          : "+f"(c[j][0]), "+f"(c[j][1]), "+f"(c[j][2]), "+f"(c[j][3])
          : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < kChains; ++j) s += c[j][0] + c[j][1] + c[j][2] + c[j][3];
  if (s == 12345.678f) sink[threadIdx.x] = s;  // keeps the loop; never true in practice
}

int main() {
  int device = 0, sms = 0;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, device));
  float* sink = nullptr;
  CHECK(cudaMalloc(&sink, 1024 * sizeof(float)));
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  std::printf("%s, %d SMs: mma.sync m16n8k16 bf16 -> fp32, %d chains per warp\n", prop.name, sms, kChains);
  for (const int warps : {4, 8, 16}) {
    const dim3 grid(sms * 4), block(32 * warps);
    mma_loop<<<grid, block>>>(sink, 1u);  // warm-up (clocks up)
    CHECK(cudaGetLastError());
    float best_ms = 1e30f;
    for (int rep = 0; rep < 5; ++rep) {
      CHECK(cudaEventRecord(start));
      mma_loop<<<grid, block>>>(sink, static_cast<uint32_t>(rep));
      CHECK(cudaGetLastError());
      CHECK(cudaEventRecord(stop));
      CHECK(cudaEventSynchronize(stop));
      float ms = 0.f;
      CHECK(cudaEventElapsedTime(&ms, start, stop));
      best_ms = ms < best_ms ? ms : best_ms;
    }
    const double flops = 2.0 * 16 * 8 * 16 * kChains * double{kIters} * grid.x * warps;
    std::printf("  %2d warps per block, 4 blocks per SM: %.1f TFLOP/s\n", warps, flops / (best_ms * 1e-3) / 1e12);
  }
  CHECK(cudaFree(sink));
  return 0;
}
