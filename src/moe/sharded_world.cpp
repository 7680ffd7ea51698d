// One process driving several GPUs through NCCL (mxmoe/sharded_moe.hpp): the communicators of
// ncclCommInitAll and the group calls, so that tools and tests need no nccl.h of their own.
#include <cuda_runtime.h>

#include <numeric>
#include <vector>

#include "common/cuda_check.hpp"
#include "moe/nccl_check.hpp"
#include "mxmoe/error.hpp"
#include "mxmoe/sharded_moe.hpp"

namespace mxmoe {
namespace {

#if !MXMOE_HAVE_NCCL
[[noreturn]] void no_nccl(const char* what) {
  detail::throw_error(what, ": this mxmoe build has no NCCL (configure with MXMOE_NCCL_ROOT)");
}
#endif

}  // namespace

LocalNcclWorld::LocalNcclWorld(int gpus) {
  int count = 0;
  MXMOE_CUDA_CHECK(cudaGetDeviceCount(&count));
  MXMOE_REQUIRE(gpus >= 1 && gpus <= count, "gpus = ", gpus, ": expected in [1, ", count, "] (the GPUs present)");
#if MXMOE_HAVE_NCCL
  comms_.assign(static_cast<size_t>(gpus), nullptr);
  std::vector<int> devices(static_cast<size_t>(gpus));
  std::iota(devices.begin(), devices.end(), 0);
  nccl_check(ncclCommInitAll(comms_.data(), gpus, devices.data()), "ncclCommInitAll");
#else
  no_nccl("LocalNcclWorld");
#endif
}

LocalNcclWorld::~LocalNcclWorld() {
#if MXMOE_HAVE_NCCL
  for (ncclComm_t c : comms_) ncclCommDestroy(c);
#endif
}

void nccl_group_start() {
#if MXMOE_HAVE_NCCL
  nccl_check(ncclGroupStart(), "ncclGroupStart");
#else
  no_nccl("nccl_group_start");
#endif
}

void nccl_group_end() {
#if MXMOE_HAVE_NCCL
  nccl_check(ncclGroupEnd(), "ncclGroupEnd");
#else
  no_nccl("nccl_group_end");
#endif
}

}  // namespace mxmoe
