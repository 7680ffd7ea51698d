#pragma once
// The fp32 sum of the ranks' partial outputs (ShardedMoe's fp32 partials) rounded once to bf16.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace mxmoe::sharded {

// out[i] = bf16(in[i]), round to nearest even; n a multiple of 4, both 16- and 8-byte aligned.
void f32_to_bf16(const float* in, uint16_t* out, size_t n, cudaStream_t stream);

}  // namespace mxmoe::sharded
