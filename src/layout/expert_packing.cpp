#include "layout/expert_packing.hpp"

#include "common/parallel_for.hpp"
#include "mxmoe/error.hpp"

namespace mxmoe {
namespace {

// pack_one(expert, its blocks, its scales, its output) for every expert, each writing all of its
// expert_bytes (so the buffer needs no clearing, and each thread first touches its own pages).
template <class PackOne>
HostBytes pack_experts(std::span<const uint8_t> blocks, std::span<const uint8_t> scales, int experts, int64_t rows,
                       int64_t kblocks, int64_t expert_bytes, unsigned threads, PackOne&& pack_one) {
  MXMOE_REQUIRE(experts > 0, "weight packing: experts must be positive, got ", experts);
  const auto src_w = static_cast<size_t>(rows * kblocks * 16), src_s = static_cast<size_t>(rows * kblocks);
  const auto count = static_cast<size_t>(experts);
  MXMOE_REQUIRE(blocks.size() == count * src_w, "weight packing: blocks: expected ", count * src_w, " bytes, got ",
                blocks.size());
  MXMOE_REQUIRE(scales.size() == count * src_s, "weight packing: scales: expected ", count * src_s, " bytes, got ",
                scales.size());
  HostBytes out;
  out.size = static_cast<size_t>(expert_bytes) * count;
  out.data.reset(new uint8_t[out.size]);  // not value-initialised: every byte is written below
  parallel_for(
      experts,
      [&](int64_t e) {
        const auto i = static_cast<size_t>(e);
        pack_one(e, blocks.data() + i * src_w, scales.data() + i * src_s,
                 out.data.get() + i * static_cast<size_t>(expert_bytes));
      },
      threads);
  return out;
}

}  // namespace

HostBytes pack_gemv_experts(std::span<const uint8_t> blocks, std::span<const uint8_t> scales, int experts,
                            const gemv::PackedShape& shape, bool swiglu_pairs, unsigned threads,
                            std::span<const int8_t> fp8_exponents) {
  const bool fp8 = !fp8_exponents.empty();
  const int64_t exponent_rows = static_cast<int64_t>(experts) * shape.rows;
  MXMOE_REQUIRE(!fp8 || experts <= 0 || static_cast<int64_t>(fp8_exponents.size()) == exponent_rows,
                "weight packing: fp8_exponents: expected ", exponent_rows, " rows, got ", fp8_exponents.size());
  return pack_experts(blocks, scales, experts, shape.rows, shape.kblocks, shape.bytes(), threads,
                      [&](int64_t e, const uint8_t* b, const uint8_t* s, uint8_t* o) {
                        const int8_t* exponents = fp8 ? fp8_exponents.data() + e * shape.rows : nullptr;
                        gemv::pack_expert(b, s, shape, swiglu_pairs, o, exponents);
                      });
}

}  // namespace mxmoe
