// GreenContext through the driver API, reached with cudaGetDriverEntryPointByVersion so that the
// library links no libcuda (a machine without a driver still loads it).
#include "moe/green_context.hpp"

#include <cuda.h>
#include <cudaTypedefs.h>

#include "common/cuda_check.hpp"
#include "mxmoe/error.hpp"

namespace mxmoe {
namespace {

template <class Fn>
Fn driver_function(const char* name, int version) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult status{};
  MXMOE_CUDA_CHECK(cudaGetDriverEntryPointByVersion(name, &p, version, cudaEnableDefault, &status));
  MXMOE_REQUIRE(status == cudaDriverEntryPointSuccess && p != nullptr, "green context: the driver has no ", name,
                " (green contexts need CUDA 12.5 or newer)");
  return reinterpret_cast<Fn>(p);
}

void check(CUresult r, const char* what) {
  MXMOE_REQUIRE(r == CUDA_SUCCESS, "green context: ", what, " failed (CUresult ", static_cast<int>(r), ")");
}

}  // namespace

struct GreenContext::Impl {
  CUgreenCtx ctx = nullptr;
  PFN_cuGreenCtxDestroy_v12040 destroy = nullptr;
};

GreenContext::GreenContext(int device, int sms) : impl_(std::make_unique<Impl>()) {
  MXMOE_REQUIRE(sms > 0, "green context: sms must be positive, got ", sms);
  int device_sms = 0;
  MXMOE_CUDA_CHECK(cudaDeviceGetAttribute(&device_sms, cudaDevAttrMultiProcessorCount, device));
  MXMOE_REQUIRE(sms <= device_sms, "green context: ", sms, " SMs asked for, the device has ", device_sms);
  MXMOE_CUDA_CHECK(cudaFree(nullptr));  // the primary context exists before the driver calls
  const auto get_resource = driver_function<PFN_cuDeviceGetDevResource_v12040>("cuDeviceGetDevResource", 12040);
  const auto split = driver_function<PFN_cuDevSmResourceSplitByCount_v12040>("cuDevSmResourceSplitByCount", 12040);
  const auto describe = driver_function<PFN_cuDevResourceGenerateDesc_v12040>("cuDevResourceGenerateDesc", 12040);
  const auto create = driver_function<PFN_cuGreenCtxCreate_v12040>("cuGreenCtxCreate", 12040);
  const auto create_stream = driver_function<PFN_cuGreenCtxStreamCreate_v12050>("cuGreenCtxStreamCreate", 12050);
  impl_->destroy = driver_function<PFN_cuGreenCtxDestroy_v12040>("cuGreenCtxDestroy", 12040);
  CUdevResource all{}, group{}, rest{};
  check(get_resource(static_cast<CUdevice>(device), &all, CU_DEV_RESOURCE_TYPE_SM), "cuDeviceGetDevResource");
  unsigned groups = 1;
  check(split(&group, &groups, &all, &rest, 0, static_cast<unsigned>(sms)), "cuDevSmResourceSplitByCount");
  MXMOE_REQUIRE(groups == 1, "green context: no group of ", sms, " SMs on this device");
  CUdevResourceDesc desc = nullptr;
  check(describe(&desc, &group, 1), "cuDevResourceGenerateDesc");
  check(create(&impl_->ctx, desc, static_cast<CUdevice>(device), CU_GREEN_CTX_DEFAULT_STREAM), "cuGreenCtxCreate");
  CUstream stream = nullptr;
  check(create_stream(&stream, impl_->ctx, CU_STREAM_NON_BLOCKING, 0), "cuGreenCtxStreamCreate");
  stream_ = stream;
  sm_count_ = static_cast<int>(group.sm.smCount);
}

GreenContext::~GreenContext() {
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  if (impl_->ctx != nullptr) impl_->destroy(impl_->ctx);
}

}  // namespace mxmoe
