#pragma once
// The weight upload's host side: every expert of one GEMM repacked from the checkpoint layout into a
// kernel layout, the experts in parallel (common/parallel_for.hpp), into one host buffer to copy.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "layout/gemv_layout.hpp"

namespace mxmoe {

struct HostBytes {
  std::unique_ptr<uint8_t[]> data;
  size_t size = 0;
};

// Checkpoint blocks [experts, rows, k/32, 16] and scales [experts, rows, k/32] in the GEMV layout
// (gemv_layout.hpp), experts shape.bytes() apart. `fp8_exponents` ([experts][rows], or empty): a W4A8
// layer's records (gemv::pack_expert). `threads`: parallel_for's (0: every core).
HostBytes pack_gemv_experts(std::span<const uint8_t> blocks, std::span<const uint8_t> scales, int experts,
                            const gemv::PackedShape& shape, bool swiglu_pairs, unsigned threads = 0,
                            std::span<const int8_t> fp8_exponents = {});

}  // namespace mxmoe
