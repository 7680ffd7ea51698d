// The grouped GEMV kernel: one warp per 16-row weight tile, one m16n8k16 bf16 MMA per 16-wide K
// step with up to 8 rows of the expert on N. Grid: x = tile groups, y = active-expert slot,
// z = row-batch split. Layout and fragment mapping: gemv_layout.hpp, common/mma_bf16.cuh.
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "kernels/common/mma_bf16.cuh"
#include "kernels/common/mx_decode.cuh"
#include "kernels/gemv/gemv.hpp"
#include "kernels/gemv/gemv_layout.hpp"
#include "moe/cuda_check.hpp"

namespace mxmoe::gemv {
namespace {

using kernels::bf16x2_mul;
using kernels::decode_e2m1x8;
using kernels::mma_m16n8k16_bf16;
using kernels::scale_multiplier;
using kernels::scale_multiplier_high;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kBatchRows = 8;  // MMA N
constexpr int kUnroll = 3;     // chunks per load round (two rounds in flight: double-buffered)

// Bytes of one staged activation row: 128-byte aligned plus 64, so the 8 rows read by one
// quarter-warp land in different banks.
__host__ __device__ constexpr int act_row_stride(int chunks) { return chunks * kChunkK * 2 + 64; }

__device__ __forceinline__ uint4 load_stream(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Activation rows [batch, batch + rows) of the expert into shared memory, each group of 8 elements
// permuted to the decode pair order (3,7,2,6,1,5,0,4) and each chunk's groups ordered (word, block).
// Loads are issued kStageUnroll at a time before their stores, so their latencies overlap. Rows past
// `rows` are zeroed without loads (they feed only MMA columns that are never stored).
constexpr int kStageUnroll = 4;

template <bool kGemm1>
__device__ void stage_rows(const GemvArgs& a, int first_row, int rows, uint8_t* smem) {
  const int groups_per_row = a.chunks * (kChunkK / 8);
  const int stride = act_row_stride(a.chunks);
  auto dest = [&](int i) {
    const int r = i / groups_per_row, k0 = (i % groups_per_row) * 8;
    const int chunk = k0 / kChunkK, block = (k0 % kChunkK) / 32, word = (k0 % 32) / 8;
    return reinterpret_cast<uint4*>(smem + r * stride + chunk * kChunkK * 2 + (word * 4 + block) * 16);
  };
  const int valid = rows * groups_per_row;
  for (int i0 = threadIdx.x; i0 < valid; i0 += kThreads * kStageUnroll) {
    uint4 x[kStageUnroll];
#pragma unroll
    for (int u = 0; u < kStageUnroll; ++u) {
      const int i = i0 + u * kThreads;
      const int r = i / groups_per_row, k0 = (i % groups_per_row) * 8;
      x[u] = make_uint4(0, 0, 0, 0);
      if (i < valid && k0 < a.k) {
        const int row = first_row + r;
        const int64_t act_row = kGemm1 ? a.row_pair[row] / a.top_k : row;
        x[u] = __ldg(reinterpret_cast<const uint4*>(a.act + act_row * a.k + k0));
      }
    }
#pragma unroll
    for (int u = 0; u < kStageUnroll; ++u) {
      const int i = i0 + u * kThreads;
      if (i >= valid) break;
      uint4 y;
      y.x = __byte_perm(x[u].y, x[u].w, 0x7632);  // (e3, e7)
      y.y = __byte_perm(x[u].y, x[u].w, 0x5410);  // (e2, e6)
      y.z = __byte_perm(x[u].x, x[u].z, 0x7632);  // (e1, e5)
      y.w = __byte_perm(x[u].x, x[u].z, 0x5410);  // (e0, e4)
      *dest(i) = y;
    }
  }
  for (int i = valid + threadIdx.x; i < kBatchRows * groups_per_row; i += kThreads) *dest(i) = make_uint4(0, 0, 0, 0);
}

// The weight loads of up to kUnroll chunks [c0, min(c0 + kUnroll, c_end)) of one tile.
struct ChunkLoads {
  uint4 lo[kUnroll], hi[kUnroll];
  uint32_t scales[kUnroll];
};

__device__ __forceinline__ void load_chunks(ChunkLoads& l, const uint8_t* w_base, const uint8_t* s_base, int c0,
                                            int c_end, int q, int kblocks) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int c = c0 + u;
    const bool valid = c < c_end && c * kChunkBlocks + q < kblocks;
    l.lo[u] = valid ? load_stream(w_base + c * kChunkWeightBytes) : make_uint4(0, 0, 0, 0);
    l.hi[u] = valid ? load_stream(w_base + c * kChunkWeightBytes + 512) : make_uint4(0, 0, 0, 0);
    l.scales[u] = valid ? *reinterpret_cast<const uint16_t*>(s_base + c * kChunkScaleBytes) : 0x7F7Fu;
  }
}

// One chunk (K = 128) of one 16-row tile: 8 MMAs.
__device__ __forceinline__ void mma_chunk(const uint4& w_lo, const uint4& w_hi, uint32_t scales, const uint8_t* b_row,
                                          float (&acc)[4]) {
  const uint32_t s_lo = scales & 0xFFu, s_hi = (scales >> 8) & 0xFFu;
  const uint32_t m_lo = scale_multiplier(s_lo), m_hi = scale_multiplier(s_hi);
  const bool big = (s_lo > 128u && s_lo != 0xFFu) || (s_hi > 128u && s_hi != 0xFFu);
  const uint32_t words_lo[4] = {w_lo.x, w_lo.y, w_lo.z, w_lo.w};
  const uint32_t words_hi[4] = {w_hi.x, w_hi.y, w_hi.z, w_hi.w};
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    uint32_t lo[4], hi[4];
    decode_e2m1x8(words_lo[w], lo);
    decode_e2m1x8(words_hi[w], hi);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      lo[j] = bf16x2_mul(lo[j], m_lo);
      hi[j] = bf16x2_mul(hi[j], m_hi);
    }
    if (big) {  // rare: scales above 2^1 need a second factor (see mx_decode.cuh)
      const uint32_t h_lo = s_lo > 128u && s_lo != 0xFFu ? scale_multiplier_high(s_lo) : 0x3F803F80u;
      const uint32_t h_hi = s_hi > 128u && s_hi != 0xFFu ? scale_multiplier_high(s_hi) : 0x3F803F80u;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        lo[j] = bf16x2_mul(lo[j], h_lo);
        hi[j] = bf16x2_mul(hi[j], h_hi);
      }
    }
    const uint4 b = *reinterpret_cast<const uint4*>(b_row + w * 64);
    mma_m16n8k16_bf16(acc, lo[0], hi[0], lo[1], hi[1], b.x, b.y);
    mma_m16n8k16_bf16(acc, lo[2], hi[2], lo[3], hi[3], b.z, b.w);
  }
}

__device__ __forceinline__ float swiglu(float gate, float linear, float alpha, float limit) {
  gate = fminf(gate, limit);
  linear = fminf(fmaxf(linear, -limit), limit);
  return gate / (1.f + __expf(-alpha * gate)) * (linear + 1.f);
}

template <bool kGemm1>
__global__ void __launch_bounds__(kThreads, 2) gemv_kernel(const GemvArgs a, const int ksplit) {
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ float partial[kWarps][4][32];  // split-K partial sums, reduced in a fixed order
  // Under programmatic dependent launch this kernel may start before the routing has finished.
  cudaGridDependencySynchronize();
  const int slot = blockIdx.y;
  if (slot >= *a.active_count) return;
  const int expert = a.active_experts[slot];
  const int row0 = a.expert_offsets[expert];
  const int rows = a.expert_offsets[expert + 1] - row0;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, q = lane & 3;
  // Warps [t*ksplit, (t+1)*ksplit) of the block share tile t and split its K chunks.
  const int tiles_per_block = kWarps / ksplit;
  const int tile = blockIdx.x * tiles_per_block + warp / ksplit;
  const int split = warp % ksplit;
  const int c_begin = a.chunks * split / ksplit, c_end = a.chunks * (split + 1) / ksplit;
  const int stride = act_row_stride(a.chunks);
  const uint8_t* w_base = a.weights + expert * a.expert_weight_stride + static_cast<int64_t>(tile) * a.chunks * kChunkWeightBytes + lane * 16;
  const uint8_t* s_base = a.scales + expert * a.expert_scale_stride + static_cast<int64_t>(tile) * a.chunks * kChunkScaleBytes + lane * 2;
  const uint8_t* b_base = smem + g * stride + q * 16;

  const bool has_tile = tile < a.tiles;
  for (int batch = blockIdx.z * kBatchRows; batch < rows; batch += gridDim.z * kBatchRows) {
    const int batch_rows = min(kBatchRows, rows - batch);
    // The first weight loads do not depend on the activations: issue them before the staging.
    ChunkLoads cur;
    if (has_tile) load_chunks(cur, w_base, s_base, c_begin, c_end, q, a.kblocks);
    stage_rows<kGemm1>(a, row0 + batch, batch_rows, smem);
    __syncthreads();
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    if (has_tile) {
      for (int c0 = c_begin; c0 < c_end; c0 += kUnroll) {
        ChunkLoads next;
        if (c0 + kUnroll < c_end) load_chunks(next, w_base, s_base, c0 + kUnroll, c_end, q, a.kblocks);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
          if (c0 + u < c_end) mma_chunk(cur.lo[u], cur.hi[u], cur.scales[u], b_base + (c0 + u) * kChunkK * 2, acc);
        cur = next;
      }
    }
    if (ksplit > 1) {
#pragma unroll
      for (int j = 0; j < 4; ++j) partial[warp][j][lane] = acc[j];
      __syncthreads();
      if (split == 0) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          acc[j] = partial[warp][j][lane];
          for (int s = 1; s < ksplit; ++s) acc[j] += partial[warp + s][j][lane];
        }
      }
    }
    if (tile < a.tiles && split == 0) {
      // Epilogue: this lane holds rows (g, g+8) of the tile for batch rows (2q, 2q+1).
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int r = 2 * q + j;
        if (r >= batch_rows) continue;
        const int64_t row = row0 + batch + r;
        if constexpr (kGemm1) {
          const int feature = tile * 8 + g;
          float gate = acc[j], linear = acc[2 + j];
          if (a.bias) {
            const uint16_t* b = a.bias + static_cast<int64_t>(expert) * a.n + 2 * feature;
            gate += __bfloat162float(__ushort_as_bfloat16(b[0]));
            linear += __bfloat162float(__ushort_as_bfloat16(b[1]));
          }
          const float act = swiglu(gate, linear, a.alpha, a.limit);
          static_cast<__nv_bfloat16*>(a.out)[row * (a.n / 2) + feature] = __float2bfloat16_rn(act);
        } else {
          const float weight = a.pair_weights[a.row_pair[row]];
          float* out = static_cast<float*>(a.out) + row * a.n + tile * kTileRows + g;
          float y0 = acc[j], y1 = acc[2 + j];
          if (a.bias) {
            const uint16_t* b = a.bias + static_cast<int64_t>(expert) * a.n + tile * kTileRows + g;
            y0 += __bfloat162float(__ushort_as_bfloat16(b[0]));
            y1 += __bfloat162float(__ushort_as_bfloat16(b[8]));
          }
          out[0] = y0 * weight;
          out[8] = y1 * weight;
        }
      }
    }
    __syncthreads();
  }
}

// Split K over more warps when the grid would otherwise leave SMs idle or unevenly loaded: at decode
// sizes the busiest SM's bytes, not total bandwidth, set the time. Cost of a split = blocks on the
// busiest SM x (weight bytes per block + a fixed per-block cost for staging and the reduction).
int choose_ksplit(int tiles, int chunks, int max_active, int sm_count) {
  constexpr int64_t kBlockOverheadBytes = 8192;
  int best = 1;
  int64_t best_cost = INT64_MAX;
  for (int ksplit = 1; ksplit <= kWarps; ksplit *= 2) {
    const int tiles_per_block = kWarps / ksplit;
    const int64_t blocks = static_cast<int64_t>((tiles + tiles_per_block - 1) / tiles_per_block) * max_active;
    const int64_t per_sm = (blocks + sm_count - 1) / sm_count;
    const int64_t cost = per_sm * (static_cast<int64_t>(tiles_per_block) * chunks * kChunkWeightBytes + kBlockOverheadBytes);
    if (cost < best_cost) {
      best = ksplit;
      best_cost = cost;
    }
  }
  return best;
}

template <bool kGemm1>
void launch(const GemvArgs& a, int64_t tokens, int max_active, cudaStream_t stream) {
  if (tokens == 0 || max_active == 0) return;
  const int ksplit = choose_ksplit(a.tiles, a.chunks, max_active, a.sm_count);
  const int tiles_per_block = kWarps / ksplit;
  const int64_t pairs = tokens * a.top_k;
  const int64_t batches = (pairs + kBatchRows * max_active - 1) / (kBatchRows * max_active);
  cudaLaunchConfig_t config{};
  config.gridDim = dim3((a.tiles + tiles_per_block - 1) / tiles_per_block, static_cast<unsigned>(max_active),
                        static_cast<unsigned>(std::clamp<int64_t>(batches, 1, 64)));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = smem_bytes(a.k);
  config.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attr;
  config.numAttrs = 1;
  MXMOE_CUDA_CHECK(cudaLaunchKernelEx(&config, gemv_kernel<kGemm1>, a, ksplit));
}

}  // namespace

size_t smem_bytes(int k) {
  const int chunks = (k / 32 + kChunkBlocks - 1) / kChunkBlocks;
  return static_cast<size_t>(kBatchRows) * act_row_stride(chunks);
}

int max_k(size_t smem_per_block_optin) {
  const int64_t chunks = (static_cast<int64_t>(smem_per_block_optin) / kBatchRows - 64) / (kChunkK * 2);
  return static_cast<int>(chunks * kChunkK);
}

void configure(size_t max_dynamic_smem) {
  MXMOE_CUDA_CHECK(cudaFuncSetAttribute(gemv_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(max_dynamic_smem)));
  MXMOE_CUDA_CHECK(cudaFuncSetAttribute(gemv_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(max_dynamic_smem)));
}

void launch_gemm1(const GemvArgs& args, int64_t tokens, int max_active, cudaStream_t stream) {
  launch<true>(args, tokens, max_active, stream);
}
void launch_gemm2(const GemvArgs& args, int64_t tokens, int max_active, cudaStream_t stream) {
  launch<false>(args, tokens, max_active, stream);
}

int ksplit_for(const GemvArgs& args, int max_active) {
  return choose_ksplit(args.tiles, args.chunks, max_active, args.sm_count);
}

}  // namespace mxmoe::gemv
