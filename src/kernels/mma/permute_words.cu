// permute_words.hpp: one 16-byte word per thread, grid-stride.
#include "kernels/mma/permute_words.hpp"

#include <algorithm>

#include "common/pdl_launch.cuh"
#include "kernels/mma/act_stage.cuh"
#include "common/cuda_check.hpp"

namespace mxmoe::mma {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) permute_words_kernel(const uint4* in, uint4* out, int64_t words) {
  kernels::pdl_wait();  // `in` may come from the predecessor
  kernels::pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < words; i += int64_t{gridDim.x} * kThreads) {
    uint32_t p[4];
    to_pairs(in[i], p);
    out[i] = make_uint4(p[0], p[1], p[2], p[3]);
  }
}

}  // namespace

void permute_words(const uint16_t* in, uint16_t* out, int64_t elements, cudaStream_t stream) {
  MXMOE_REQUIRE(elements % 8 == 0, "permute_words: elements must be a multiple of 8, got ", elements);
  const int64_t words = elements / 8;
  if (words == 0) return;
  const int blocks = static_cast<int>(std::min<int64_t>((words + kThreads - 1) / kThreads, 4096));
  kernels::launch_with_pdl(permute_words_kernel, dim3(blocks), dim3(kThreads), 0, stream,
                           reinterpret_cast<const uint4*>(in), reinterpret_cast<uint4*>(out), words);
}

}  // namespace mxmoe::mma
