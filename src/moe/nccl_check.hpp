#pragma once
// An NCCL call's result as an mxmoe::Error naming the call, for the files that call NCCL (they include
// nccl.h through this header, which is empty without NCCL).
#if MXMOE_HAVE_NCCL
#include <nccl.h>

#include "mxmoe/error.hpp"

namespace mxmoe {

inline void nccl_check(ncclResult_t r, const char* what) {
  MXMOE_REQUIRE(r == ncclSuccess, "NCCL ", what, ": ", ncclGetErrorString(r));
}

}  // namespace mxmoe
#endif
