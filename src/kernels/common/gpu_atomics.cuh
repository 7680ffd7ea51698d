#pragma once
// A device-scope counter step with acquire-release semantics (PTX ISA, "Memory Consistency Model"):
// the arrival of a block whose threads met at a block barrier after their stores, read by the last
// arrival before its threads read those stores. One atomic instead of fence.sc + atomic + fence.sc.
#include <cstdint>

namespace mxmoe::kernels {

__device__ __forceinline__ int32_t fetch_add_acq_rel_gpu(int32_t* counter, int32_t value) {
  int32_t old;
  asm volatile("atom.add.acq_rel.gpu.global.s32 %0, [%1], %2;\n" : "=r"(old) : "l"(counter), "r"(value) : "memory");
  return old;
}

}  // namespace mxmoe::kernels
