// The tensor-map builder's argument checks (kernels/common/tensor_map.hpp) and the workspace room
// of the wgmma tiles' expanded GEMM1 input (moe/workspace.hpp). The checks run before the driver is
// asked, so they hold on a machine without a GPU; the encoding itself runs in the GPU tests.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "kernels/common/tensor_map.hpp"
#include "moe/workspace.hpp"
#include "mxmoe/error.hpp"

namespace mxmoe {
namespace {

// The message of the mxmoe::Error that encoding these arguments throws ("" if none).
std::string encode_error(const void* base, std::span<const uint64_t> dims, std::span<const uint64_t> strides,
                         std::span<const uint32_t> box) {
  try {
    (void)kernels::encode_tiled_map("test tensor", CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, base, dims, strides, box,
                                    CU_TENSOR_MAP_SWIZZLE_NONE);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

alignas(16) const uint8_t kBuffer[64] = {};

TEST(TensorMap, RefusesBadArgumentsByName) {
  const uint64_t dims[] = {64, 8}, strides[] = {128};
  const uint32_t box[] = {64, 8};
  const uint64_t bad_stride[] = {120};
  const uint32_t big_box[] = {300, 8}, empty_box[] = {64, 0};
  const uint64_t empty_dims[] = {0, 8};
  struct Case {
    const char* name;
    std::string message;
    const char* expect;
  } cases[] = {
      {"rank", encode_error(kBuffer, dims, {}, box), "rank 2 with 0 strides"},
      {"alignment", encode_error(kBuffer + 8, dims, strides, box), "not 16-byte aligned"},
      {"stride", encode_error(kBuffer, dims, bad_stride, box), "stride 0 is 120 bytes"},
      {"large box", encode_error(kBuffer, dims, strides, big_box), "box extent 0 is 300"},
      {"empty box", encode_error(kBuffer, dims, strides, empty_box), "box extent 1 is 0"},
      {"empty extent", encode_error(kBuffer, empty_dims, strides, box), "extent 0 is 0"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_NE(c.message.find("tensor map test tensor"), std::string::npos) << c.message;
    EXPECT_NE(c.message.find(c.expect), std::string::npos) << c.message;
  }
}

// GEMM2's fp32 output buffer also holds GEMM1's expanded bf16 input (pairs x H padded to whole
// chunks) when the tensor-core tiles may run, also where H is so small that padding more than doubles it.
TEST(TensorMap, WorkspaceHoldsTheExpandedInput) {
  for (const int hidden : {32, 96, 160, 2880}) {
    MoeConfig cfg;
    cfg.num_experts = 8;
    cfg.top_k = 2;
    cfg.hidden = hidden;
    cfg.intermediate = 64;
    const int64_t tokens = 37;
    const WorkspaceLayout with(cfg, tokens, {}, 2, true), without(cfg, tokens, {}, 2, false);
    const size_t pairs = static_cast<size_t>(tokens * cfg.top_k);
    const size_t with_bytes = with.combine_counters - with.expert_rows;  // the next buffer's start
    EXPECT_GE(with_bytes, pairs * static_cast<size_t>(sm90::padded_k(hidden)) * 2) << hidden;
    EXPECT_GE(with_bytes, pairs * static_cast<size_t>(hidden) * 4) << hidden;
    EXPECT_GE(without.combine_counters - without.expert_rows, pairs * static_cast<size_t>(hidden) * 4) << hidden;
  }
}

}  // namespace
}  // namespace mxmoe
