#pragma once
// The experts' packed weight records (gemv_layout.hpp: experts back to back, tile by tile, chunk by
// chunk) as a 3-D tensor map for cp.async.bulk.tensor (tma.cuh): [expert tile][chunk][record word],
// 8-byte words. A box of {words, 1, tiles} is one chunk of `tiles` consecutive tiles, landing as their
// records (or the first `words` words of each) back to back. Tiles past the last expert's read as zeros.
// Used by the wgmma tiles and the 16- and 32-row swap-AB tiles.
#include <cuda.h>

#include <cstdint>

#include "kernels/common/grouped_args.hpp"
#include "kernels/gemv/gemv_layout.hpp"

namespace mxmoe::kernels {

inline constexpr int kRecordWords = gemv::kChunkBytes / 8;  // a record in 8-byte elements
static_assert(gemv::kChunkBytes % 16 == 0, "records are whole 16-byte units (the tensor map's strides)");

// Checks that `w` holds its experts back to back (mxmoe::Error naming `what` otherwise), then encodes
// the map with box {box_words, 1, box_tiles}.
CUtensorMap encode_record_map(const char* what, const GroupedWeights& w, uint32_t box_words, uint32_t box_tiles);

// The maps of a block of `box_tiles` tiles (a kernel parameter, __grid_constant__): `whole` with box
// {box_words, 1, box_tiles}, and `tail` with a box of only w.tiles % box_tiles tiles (or box_tiles when
// that divides them) for an expert's last block, so that no copy brings the next expert's records, which
// no warp reads. gpt-oss's GEMM2 has 180 tiles: a box of 16 copied 6.7% more of its weight bytes.
struct BlockRecordMaps {
  CUtensorMap whole;
  CUtensorMap tail;
};
BlockRecordMaps encode_block_record_maps(const char* what, const GroupedWeights& w, uint32_t box_words,
                                         uint32_t box_tiles);

#if defined(__CUDACC__)
// The map of the block whose first tile is `tile0` (of an expert's `tiles`), and how many records its
// box lands (the bytes its copy completes on the stage barrier are that many times the words).
__device__ __forceinline__ const CUtensorMap* block_record_map(const BlockRecordMaps& maps, int tiles, int tile0,
                                                               int box_tiles, int& block_tiles) {
  block_tiles = tiles - tile0 < box_tiles ? tiles - tile0 : box_tiles;
  return block_tiles < box_tiles ? &maps.tail : &maps.whole;
}
#endif

}  // namespace mxmoe::kernels
