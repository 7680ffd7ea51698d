// bf16 -> MXFP8 expand (expand.hpp): one block per m-tile of 128 padded rows, one thread per
// (row, 32-element block). The quantisation is the CPU reference's bit for bit (common/mxfp8_quant.cuh).
#include "common/mxfp8_quant.cuh"
#include "common/pdl_launch.cuh"
#include "common/cuda_check.hpp"
#include "mxmoe/scale_layout.hpp"
#include "routing/expand.hpp"
#include "common/m_tiles.cuh"

namespace mxmoe::routing {
namespace {

constexpr int kRows = 128;
constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) expand_mxfp8_kernel(const ExpandArgs a, const RoutingBuffers r) {
  __shared__ MTile tile;
  // Programmatic dependent launch: the routing comes from the route kernel.
  kernels::pdl_wait();
  kernels::pdl_trigger();
  const int x = static_cast<int>(blockIdx.x);
  find_m_tile<kRows>(x, a.experts, r.expert_offsets, tile);
  __syncthreads();
  if (tile.expert < 0) return;
  const int kblocks = a.k / 32;
  const int padded_kb = static_cast<int>(padded_kblocks(kblocks));
  const bool floor_rule = a.rule == ScaleRule::Floor;
  for (int i = threadIdx.x; i < kRows * padded_kb; i += kThreads) {
    const int local = i / padded_kb, kb = i - local * padded_kb;
    const int64_t out_row = int64_t{x} * kRows + local;
    uint8_t* scale = a.scales + swizzled_scale_offset(out_row, kb, kblocks);
    if (kb >= kblocks) {  // the padding k-blocks of the swizzled layout
      *scale = 0;
      continue;
    }
    uint4* codes = reinterpret_cast<uint4*>(a.codes + out_row * a.k + kb * 32);
    if (local >= tile.rows) {  // a padding row
      codes[0] = codes[1] = make_uint4(0, 0, 0, 0);
      *scale = 0;
      continue;
    }
    const int row = tile.row0 + local;
    const int64_t src_row = a.gather ? r.row_pair[row] / a.top_k : row;
    const int64_t src = src_row * a.k + kb * 32;
    float x[32];
    if (a.f32) {
      const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(a.act) + src);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float4 v = p[j];
        x[4 * j] = v.x, x[4 * j + 1] = v.y, x[4 * j + 2] = v.z, x[4 * j + 3] = v.w;
      }
    } else {
      const uint4* p = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(a.act) + src);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint4 v = p[j];
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          x[8 * j + 2 * i] = __uint_as_float(w[i] << 16);
          x[8 * j + 2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
        }
      }
    }
    uint32_t out[8];
    const uint32_t byte = kernels::quantise_mxfp8_block(x, floor_rule, out);
    codes[0] = make_uint4(out[0], out[1], out[2], out[3]);
    codes[1] = make_uint4(out[4], out[5], out[6], out[7]);
    *scale = static_cast<uint8_t>(byte);
  }
}

}  // namespace

int64_t expand_padded_rows(int64_t pairs, int64_t max_active) { return m_tiles_bound(pairs, max_active, kRows) * kRows; }

int64_t expand_scale_bytes(int64_t pairs, int64_t max_active, int k) {
  return swizzled_scale_bytes(expand_padded_rows(pairs, max_active), k / 32);
}

void expand_mxfp8(const ExpandArgs& args, const RoutingBuffers& routing, int64_t tokens, int max_active,
                  cudaStream_t stream) {
  MXMOE_REQUIRE(args.k > 0 && args.k % 32 == 0, "expand: k must be a positive multiple of 32, got ", args.k);
  MXMOE_REQUIRE(args.experts > 0, "expand: experts must be positive, got ", args.experts);
  MXMOE_REQUIRE(args.act != nullptr && args.codes != nullptr && args.scales != nullptr,
                "expand: act, codes and scales must not be null");
  if (tokens == 0 || max_active == 0) return;
  const int64_t blocks = m_tiles_bound(tokens * args.top_k, max_active, kRows);
  kernels::launch_with_pdl(expand_mxfp8_kernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream, args,
                           routing);
}

}  // namespace mxmoe::routing
