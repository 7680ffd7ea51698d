#pragma once
// A stream whose kernels run on a fixed number of the device's SMs (a CUDA green context), so that a
// Hopper GPU can execute a smaller target's plan on that target's SM count (gb10: 48 SMs). Kernels
// launched into stream() by the runtime run only on the context's SMs; device memory is shared.
#include <cuda_runtime.h>

#include <memory>

namespace mxmoe {

class GreenContext {
 public:
  // At least `sms` SMs of `device` (the driver splits in groups: sm_count() says what was granted); an
  // Error when the driver has no green contexts or the device has fewer SMs.
  GreenContext(int device, int sms);
  ~GreenContext();
  GreenContext(const GreenContext&) = delete;
  GreenContext& operator=(const GreenContext&) = delete;

  cudaStream_t stream() const { return stream_; }
  int sm_count() const { return sm_count_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  cudaStream_t stream_ = nullptr;
  int sm_count_ = 0;
};

}  // namespace mxmoe
