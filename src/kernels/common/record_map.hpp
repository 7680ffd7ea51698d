#pragma once
// The experts' packed weight records (gemv_layout.hpp: experts back to back, tile by tile, chunk by
// chunk) as a 3-D tensor map for cp.async.bulk.tensor (tma.cuh): [expert tile][chunk][record word],
// 8-byte words. A box of {words, 1, tiles} is one chunk of `tiles` consecutive tiles, landing as their
// records (or the first `words` words of each) back to back. Tiles past the last expert's read as zeros.
// Used by the wgmma tiles and the 16- and 32-row swap-AB tiles.
#include <cuda.h>

#include <cstdint>

#include "kernels/common/grouped_args.hpp"
#include "layout/gemv_layout.hpp"

namespace mxmoe::kernels {

inline constexpr int kRecordWords = gemv::kChunkBytes / 8;  // a record in 8-byte elements
static_assert(gemv::kChunkBytes % 16 == 0, "records are whole 16-byte units (the tensor map's strides)");

// Checks that `w` holds its experts back to back (mxmoe::Error naming `what` otherwise), then encodes
// the map with box {box_words, 1, box_tiles}.
CUtensorMap encode_record_map(const char* what, const GroupedWeights& w, uint32_t box_words, uint32_t box_tiles);

}  // namespace mxmoe::kernels
