// record_map.hpp.
#include "kernels/common/record_map.hpp"

#include "kernels/common/tensor_map.hpp"
#include "common/cuda_check.hpp"

namespace mxmoe::kernels {

CUtensorMap encode_record_map(const char* what, const GroupedWeights& w, uint32_t box_words, uint32_t box_tiles) {
  MXMOE_REQUIRE(w.experts > 0 && w.expert_stride == int64_t{w.tiles} * w.chunks * gemv::kChunkBytes, what,
                ": the weights must be the packed experts back to back (experts ", w.experts, ", stride ",
                w.expert_stride, ")");
  const uint64_t dims[] = {kRecordWords, static_cast<uint64_t>(w.chunks),
                           static_cast<uint64_t>(w.experts) * static_cast<uint64_t>(w.tiles)};
  const uint64_t strides[] = {gemv::kChunkBytes, static_cast<uint64_t>(w.chunks) * gemv::kChunkBytes};
  const uint32_t box[] = {box_words, 1, box_tiles};
  return encode_tiled_map(what, CU_TENSOR_MAP_DATA_TYPE_UINT64, w.weights, dims, strides, box,
                          CU_TENSOR_MAP_SWIZZLE_NONE);
}

}  // namespace mxmoe::kernels
