// What the GEMV family's weight stream could reach: read-only bandwidth of the DRAM for the access
// patterns a decode layer can use, against the copy kernel `mxmoe bench` takes as its ceiling (bytes
// read plus bytes written). Per-warp rings of cp.async.bulk stages as the GEMV kernels fill them
// (`gemv_block.cuh`), drained either as fast as they land (lane 0 alone: the pattern's upper bound)
// or after the kernels' own decode and MMAs of each record (`decode`: the GEMV loop without its
// prologue and epilogue). Patterns:
//   copy        the ceiling kernel of `mxmoe bench` (grid-stride uint4, read + write counted)
//   read        grid-stride uint4 loads only
//   tiles       8 warps per block, each warp streams one 16-row tile (23 records of 1088 B, the
//               GEMV layout at K = 2880), or its K part with split-K: the GEMV kernels' pattern
//   interleave  the same tiles, with the block's tiles stored record-interleaved (chunk-major),
//               so the block's warps read neighbouring bytes at any moment
//   balanced    as many blocks as are resident; the bytes split evenly, one contiguous range a warp
// A ring is S slots of R records ("SxR records"): the GEMV kernels use 2x2. "start" rows add a GEMV GEMM1
// block's start to each block (kStartup); `stream_read start` runs only those.
// Every pattern rotates over 6 windows of a 5 GiB buffer (more than the L2 holds), 6 launches per
// CUDA graph, median of 30 replays. Built with the tools (build*/bench/micro/stream_read), or by hand:
//   nvcc -O3 -std=c++20 -arch=sm_90a -Isrc -Iinclude -o stream_read bench/micro/stream_read.cu && ./stream_read
// Needs sm_90 or newer (bulk copies); elsewhere its ring kernel traps.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "check.cuh"
#include "kernels/common/bulk_copy.cuh"
#include "kernels/common/shared_load.cuh"
#include "kernels/gemv/gemv_device.cuh"

constexpr uint32_t kRecord = mxmoe::gemv::kChunkBytes;  // one 16-row x 128-K record of the GEMV layout: 1088 B
constexpr uint32_t kTileRecords = 23;                   // K = 2880: 22.5 chunks, the last one padded
constexpr uint32_t kTileBytes = kRecord * kTileRecords;
constexpr int kWarps = 8;
constexpr int kWindows = 6;
using namespace mxmoe;

enum class Mode { tiles, interleave, balanced };

__global__ void copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    dst[i] = src[i];
}

__global__ void read_kernel(const uint4* __restrict__ src, size_t n, uint32_t* sink) {
  uint32_t acc = 0;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    const uint4 v = __ldg(src + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9E3779B9u) sink[threadIdx.x] = acc;  // keeps the loads; never true for this data
}

// One warp's work: `stages` stages of up to kChunks records; stage i's bytes per the mode.
struct WarpWork {
  const uint8_t* base;            // tile start (tiles), group start (interleave), range start (balanced)
  uint32_t stages;
  uint32_t chunk0, chunk_end;     // tiles, interleave: the warp's records of its tile (its K part)
  uint32_t group, tile_in_group;  // interleave: tiles per block and this warp's one
  uint64_t range_bytes;           // balanced only
};

// Records in stage i (the data is only consumed by whole records: balanced ranges are multiples).
template <int kChunks>
__device__ __forceinline__ uint32_t stage_records(Mode mode, const WarpWork& w, uint32_t i) {
  if (mode == Mode::balanced) {
    const uint64_t lo = uint64_t{i} * kChunks * kRecord;
    return static_cast<uint32_t>(min(uint64_t{kChunks * kRecord}, w.range_bytes - lo) / kRecord);
  }
  return min(uint32_t{kChunks}, w.chunk_end - (w.chunk0 + kChunks * i));
}

template <int kChunks>
__device__ __forceinline__ void issue_stage(Mode mode, const WarpWork& w, uint32_t i, uint32_t dst, uint32_t bar) {
  constexpr uint32_t kStage = kChunks * kRecord;
  if (mode == Mode::balanced) {
    const uint64_t lo = uint64_t{i} * kStage;
    const uint32_t bytes = static_cast<uint32_t>(min(uint64_t{kStage}, w.range_bytes - lo));
    kernels::mbarrier_arrive_expect_tx(bar, bytes);
    kernels::bulk_copy_to_shared(dst, w.base + lo, bytes, bar);
    return;
  }
  const uint32_t chunk = w.chunk0 + kChunks * i, chunks = min(uint32_t{kChunks}, w.chunk_end - chunk);
  kernels::mbarrier_arrive_expect_tx(bar, chunks * kRecord);
  if (mode == Mode::tiles) {
    kernels::bulk_copy_to_shared(dst, w.base + size_t{chunk} * kRecord, chunks * kRecord, bar);
  } else {
    for (uint32_t c = 0; c < chunks; ++c)
      kernels::bulk_copy_to_shared(dst + c * kRecord, w.base + (size_t{chunk + c} * w.group + w.tile_in_group) * kRecord,
                                   kRecord, bar);
  }
}

constexpr uint32_t kActBytes = kTileRecords * gemv::kChunkK * 2;  // one staged activation row, K = 2944

// kStages slots of kChunks records per warp. kWork: every lane runs the GEMV kernels' own decode and
// MMAs (gemv::mma_chunk, one 8-row batch against one staged row) on each record as it lands, so the
// ring is refilled only after that work, as in the kernels; without it lane 0 alone drains the ring.
// kStartup (with kWork): each block first pays a GEMV GEMM1 block's start after a route kernel: three
// dependent loads before its first weight request (the slot's expert and rows), two more and a block
// barrier after it (its rows staged), from `chain` (a small table, hot in L2).
template <int kStages, int kChunks, bool kWork, bool kEarly = false, bool kStartup = false>
__global__ void __launch_bounds__(kWarps * 32) ring_kernel(const uint8_t* base, Mode mode, uint64_t total_bytes,
                                                           uint32_t ksplit, uint32_t* sink, const uint32_t* chain) {
  static_assert(!kStartup || kWork, "the start's barrier needs every lane");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // cp.async.bulk and mbarrier transaction counts need sm_90
#else
  constexpr uint32_t kStage = kChunks * kRecord;
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(8) uint64_t bars[kWarps][kStages];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (kWork) {  // the staged row: small bf16 values, never zero
    for (uint32_t i = threadIdx.x; i < kActBytes / 4; i += blockDim.x)
      reinterpret_cast<uint32_t*>(smem)[i] = 0x3C013C01u + i;
    __syncthreads();
  }
  if (!kWork && lane != 0) return;  // one thread per warp drives its ring; nothing needs a block barrier
  uint32_t link = blockIdx.x & 1023u;
  if constexpr (kStartup) {
    for (int i = 0; i < 3; ++i) link = __ldcg(chain + link);
    if (link == 0xFFFFFFFFu) base += 1;  // never: the requests below wait for the chain
  }

  WarpWork w{};
  if (mode == Mode::balanced) {
    const uint64_t warps = uint64_t{gridDim.x} * kWarps, gw = uint64_t{blockIdx.x} * kWarps + warp;
    const uint64_t per = (total_bytes / warps + kRecord - 1) / kRecord * kRecord;
    const uint64_t lo = min(total_bytes, gw * per), hi = min(total_bytes, lo + per);
    w.base = base + lo;
    w.range_bytes = hi - lo;
    w.stages = static_cast<uint32_t>((w.range_bytes + kStage - 1) / kStage);
  } else {
    // ksplit warps share a tile, each streaming one part of its K (as the GEMV kernels' split-K).
    const uint32_t group = kWarps / ksplit, part = static_cast<uint32_t>(warp) % ksplit;
    const uint64_t tile = uint64_t{blockIdx.x} * group + static_cast<uint32_t>(warp) / ksplit;
    w.chunk0 = part * kTileRecords / ksplit;
    w.chunk_end = (part + 1) * kTileRecords / ksplit;
    w.stages = (w.chunk_end - w.chunk0 + kChunks - 1) / kChunks;
    if (mode == Mode::tiles) {
      w.base = base + tile * kTileBytes;
    } else {
      w.base = base + uint64_t{blockIdx.x} * group * kTileBytes;
      w.group = group;
      w.tile_in_group = static_cast<uint32_t>(warp) / ksplit;
    }
  }

  const uint32_t ring = kernels::shared_address(smem) + (kWork ? kActBytes : 0) + static_cast<uint32_t>(warp) * kStages * kStage;
  const uint32_t bar0 = kernels::shared_address(&bars[warp][0]);
  if (lane == 0) {
    for (int s = 0; s < kStages; ++s) kernels::mbarrier_init(&bars[warp][s], 1);
    kernels::fence_barrier_init();
    for (uint32_t s = 0; s < kStages && s < w.stages; ++s) issue_stage<kChunks>(mode, w, s, ring + s * kStage, bar0 + 8 * s);
  }
  __syncwarp();
  if constexpr (kStartup) {
    for (int i = 0; i < 2; ++i) link = __ldcg(chain + link);
    if (link == 0xFFFFFFFFu) sink[0] = link;  // never
    __syncthreads();
  }
  float chains[2][1][4] = {};
  const uint32_t b_rows[1] = {kernels::shared_address(smem) + (lane & 3) * 16};
  uint32_t offset = w.chunk0 * gemv::kChunkK * 2, acc = 0;
  for (uint32_t i = 0; i < w.stages; ++i) {
    const uint32_t slot = i % kStages, dst = ring + slot * kStage, bar = bar0 + 8 * slot;
    kernels::mbarrier_wait_parity(bar, (i / kStages) & 1);
    if constexpr (kWork && kEarly) {
      // The stage's words into registers first, the slot refilled, then the decode and MMAs: the
      // refill no longer waits for the math.
      const uint32_t records = stage_records<kChunks>(mode, w, i);
      gemv::ChunkWords words[kChunks];
#pragma unroll
      for (uint32_t u = 0; u < kChunks; ++u)
        if (u == 0 || u < records) words[u] = gemv::load_chunk_words(dst + u * kRecord, lane);
      __syncwarp();
      if (lane == 0) {
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // as below
        if (i + kStages < w.stages) issue_stage<kChunks>(mode, w, i + kStages, dst, bar);
      }
#pragma unroll
      for (uint32_t u = 0; u < kChunks; ++u) {
        if (u > 0 && u >= records) break;
        gemv::mma_chunk<false>(words[u], b_rows, offset, chains);
        offset = offset + gemv::kChunkK * 2 == kActBytes ? 0 : offset + gemv::kChunkK * 2;
      }
      continue;
    }
    if constexpr (kWork) {
      const uint32_t records = stage_records<kChunks>(mode, w, i);
#pragma unroll
      for (uint32_t u = 0; u < kChunks; ++u) {
        if (u > 0 && u >= records) break;
        gemv::mma_chunk<false>(gemv::load_chunk_words(dst + u * kRecord, lane), b_rows, offset, chains);
        offset = offset + gemv::kChunkK * 2 == kActBytes ? 0 : offset + gemv::kChunkK * 2;
      }
      __syncwarp();  // every lane has read the stage before it is refilled
    } else {
      acc ^= kernels::ld_shared_u32(dst);
    }
    if (lane == 0) {
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // the reads before the next copy's write
      if (i + kStages < w.stages) issue_stage<kChunks>(mode, w, i + kStages, dst, bar);
    }
  }
  const float s = chains[0][0][0] + chains[0][0][1] + chains[1][0][2] + chains[1][0][3];
  if (acc == 0x9E3779B9u || s == 1234.5f) sink[threadIdx.x] = acc;  // keeps the work; never true here
#endif
}

struct Buffers {
  uint8_t* a = nullptr;
  uint8_t* b = nullptr;
  uint32_t* sink = nullptr;
  uint32_t* chain = nullptr;  // 1024 links for kStartup
  size_t bytes = size_t{1} << 30;       // the copy's buffers
  size_t a_bytes = size_t{5} << 30;     // the streams' windows (6 of up to 720 MB)
};

// Median ms per launch of `launch(window)` over 30 replays of a graph of kWindows launches.
template <class Launch>
double time_ms(cudaStream_t stream, Launch launch) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (int w = 0; w < kWindows; ++w) launch(w);
  CHECK(cudaStreamEndCapture(stream, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 20; ++i) CHECK(cudaGraphLaunch(exec, stream));  // warm-up: clocks, TLB
  std::vector<float> ms;
  for (int rep = 0; rep < 30; ++rep) {
    CHECK(cudaEventRecord(start, stream));
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaEventRecord(stop, stream));
    CHECK(cudaEventSynchronize(stop));
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t / kWindows);
  }
  std::sort(ms.begin(), ms.end());
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  return ms[ms.size() / 2];
}

template <int kStages, int kChunks = 2, bool kWork = false, bool kEarly = false, bool kStartup = false>
void run_ring(cudaStream_t stream, const Buffers& buf, int sms, const char* name, Mode mode, uint64_t bytes,
              int blocks_per_sm, uint32_t ksplit = 1) {
  // Pad the dynamic shared memory so that exactly blocks_per_sm blocks fit on an SM.
  const int ring_bytes = kWarps * kStages * kChunks * kRecord + (kWork ? kActBytes : 0);
  const int pad = std::max(ring_bytes, (blocks_per_sm == 1 ? 200 : blocks_per_sm == 2 ? 100 : 70) * 1024);
  const auto kernel = ring_kernel<kStages, kChunks, kWork, kEarly, kStartup>;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, pad));
  int resident = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, kWarps * 32, pad));
  const unsigned grid = mode == Mode::balanced ? static_cast<unsigned>(sms * resident)
                                               : static_cast<unsigned>(bytes * ksplit / (uint64_t{kWarps} * kTileBytes));
  const uint64_t window = (bytes + (1 << 20)) & ~uint64_t{(1 << 20) - 1};
  const double ms = time_ms(stream, [&](int w) {
    kernel<<<grid, kWarps * 32, pad, stream>>>(buf.a + w * window, mode, bytes, ksplit, buf.sink, buf.chain);
    CHECK(cudaGetLastError());
  });
  std::printf("  %-11s %6.1f MB  ksplit %u  %dx%d records  %-7s %d blocks/SM  %5u blocks  %7.1f us  %6.0f GB/s\n",
              name, bytes / 1e6, ksplit, kStages, kChunks, kWork ? (kStartup ? "start" : kEarly ? "early" : "decode") : "",
              resident, grid, ms * 1e3, bytes / (ms * 1e-3) / 1e9);
}

int main(int argc, char** argv) {
  // `stream_read start`: only the start-cost rows at the end.
  const bool start_only = argc > 1 && std::string(argv[1]) == "start";
  int device = 0, sms = 0;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, device));
  Buffers buf;
  CHECK(cudaMalloc(&buf.a, buf.a_bytes));
  CHECK(cudaMalloc(&buf.b, buf.bytes));
  CHECK(cudaMalloc(&buf.sink, 1024 * sizeof(uint32_t)));
  CHECK(cudaMemset(buf.a, 0x5A, buf.a_bytes));
  {
    std::vector<uint32_t> links(1024);
    for (uint32_t i = 0; i < 1024; ++i) links[i] = (i * 97u + 13u) & 1023u;
    CHECK(cudaMalloc(&buf.chain, links.size() * sizeof(uint32_t)));
    CHECK(cudaMemcpy(buf.chain, links.data(), links.size() * sizeof(uint32_t), cudaMemcpyHostToDevice));
  }
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  std::printf("%s, %d SMs, L2 %d MB\n", prop.name, sms, prop.l2CacheSize >> 20);

  const double copy_ms = time_ms(stream, [&](int) {
    copy_kernel<<<sms * 8, 512, 0, stream>>>(reinterpret_cast<const uint4*>(buf.a), reinterpret_cast<uint4*>(buf.b),
                                             buf.bytes / 16);
    CHECK(cudaGetLastError());
  });
  std::printf("  copy        %6.1f MB read + written: %6.0f GB/s (the ceiling `mxmoe bench` reports)\n",
              buf.bytes / 1e6, 2.0 * buf.bytes / (copy_ms * 1e-3) / 1e9);

  // gpt-oss-120b GEMM1 weights at T = 4 (16 expert slots x 360 tiles, unsplit), at T = 1 (4 slots,
  // split-K 2) and GEMM2 at T = 1 (4 slots x 180 tiles, split-K 4): the GEMV kernels' choices.
  struct Case {
    uint64_t tiles;
    uint32_t ksplit;
  };
  for (const Case c : {Case{5760, 1}, Case{1440, 2}, Case{720, 4}}) {
    if (start_only) break;
    const uint64_t bytes = c.tiles * kTileBytes, window = (bytes + (1 << 20)) & ~uint64_t{(1 << 20) - 1};
    const double read_ms = time_ms(stream, [&](int w) {
      read_kernel<<<sms * 8, 512, 0, stream>>>(reinterpret_cast<const uint4*>(buf.a + w * window), bytes / 16,
                                               buf.sink);
      CHECK(cudaGetLastError());
    });
    std::printf("  read        %6.1f MB  grid-stride loads                                  %7.1f us  %6.0f GB/s\n",
                bytes / 1e6, read_ms * 1e3, bytes / (read_ms * 1e-3) / 1e9);
    const uint32_t k = c.ksplit, other_k = k == 1 ? 2 : k / 2;
    // The copies alone (lane 0 drains the ring).
    run_ring<2>(stream, buf, sms, "tiles", Mode::tiles, bytes, 3, k);
    run_ring<2>(stream, buf, sms, "tiles", Mode::tiles, bytes, 2, k);
    run_ring<4>(stream, buf, sms, "tiles", Mode::tiles, bytes, 3, k);
    run_ring<2>(stream, buf, sms, "tiles", Mode::tiles, bytes, 3, other_k);
    run_ring<2>(stream, buf, sms, "interleave", Mode::interleave, bytes, 3, k);
    run_ring<4>(stream, buf, sms, "interleave", Mode::interleave, bytes, 3, k);
    run_ring<2>(stream, buf, sms, "balanced", Mode::balanced, bytes, 3);
    run_ring<4>(stream, buf, sms, "balanced", Mode::balanced, bytes, 3);
    run_ring<4>(stream, buf, sms, "balanced", Mode::balanced, bytes, 1);
    // With the kernels' decode and MMAs on every record: the GEMV ring (2 slots of 2 records), other
    // rings, and "early": each stage's words loaded into registers and its slot refilled before the math.
    run_ring<2, 2, true>(stream, buf, sms, "tiles", Mode::tiles, bytes, 3, k);
    run_ring<2, 2, true, true>(stream, buf, sms, "tiles", Mode::tiles, bytes, 3, k);
    run_ring<3, 2, true>(stream, buf, sms, "tiles", Mode::tiles, bytes, 3, k);
    run_ring<4, 1, true>(stream, buf, sms, "tiles", Mode::tiles, bytes, 3, k);
    run_ring<6, 1, true>(stream, buf, sms, "tiles", Mode::tiles, bytes, 3, k);
    run_ring<2, 2, true>(stream, buf, sms, "tiles", Mode::tiles, bytes, 3, other_k);
    run_ring<4, 1, true>(stream, buf, sms, "tiles", Mode::tiles, bytes, 3, other_k);
    run_ring<2, 2, true>(stream, buf, sms, "interleave", Mode::interleave, bytes, 3, k);
    run_ring<2, 2, true>(stream, buf, sms, "balanced", Mode::balanced, bytes, 3);
    run_ring<4, 1, true>(stream, buf, sms, "balanced", Mode::balanced, bytes, 3);
    run_ring<2, 2, true, true>(stream, buf, sms, "balanced", Mode::balanced, bytes, 3);
  }
  // A whole layer's weights as one stream (gpt-oss-120b: GEMM1's 360 and GEMM2's 180 tiles per active
  // expert): what one kernel that read both GEMMs' bytes, and did nothing else, could reach. T = 1 (4
  // experts), T = 4 (15.6), T = 16 (53). The layer's own kernels also route, wait for GEMM1 before GEMM2
  // and combine; this is the stream alone.
  if (!start_only) std::printf("  one stream of a layer's weights (both GEMMs):\n");
  for (const double experts : {4.0, 15.6, 53.0}) {
    if (start_only) break;
    const uint64_t tiles = static_cast<uint64_t>(experts * 540 / kWarps) * kWarps;
    const uint64_t bytes = tiles * kTileBytes, window = (bytes + (1 << 20)) & ~uint64_t{(1 << 20) - 1};
    const double read_ms = time_ms(stream, [&](int w) {
      read_kernel<<<sms * 8, 512, 0, stream>>>(reinterpret_cast<const uint4*>(buf.a + w * window), bytes / 16,
                                               buf.sink);
      CHECK(cudaGetLastError());
    });
    std::printf("  read        %6.1f MB  grid-stride loads (%.1f experts)                    %7.1f us  %6.0f GB/s\n",
                bytes / 1e6, experts, read_ms * 1e3, bytes / (read_ms * 1e-3) / 1e9);
    run_ring<2>(stream, buf, sms, "tiles", Mode::tiles, bytes, 3, 1);
    run_ring<2>(stream, buf, sms, "balanced", Mode::balanced, bytes, 3);
    run_ring<2, 2, true>(stream, buf, sms, "tiles", Mode::tiles, bytes, 3, 1);
    run_ring<2, 2, true>(stream, buf, sms, "tiles", Mode::tiles, bytes, 3, 2);
    run_ring<2, 2, true>(stream, buf, sms, "balanced", Mode::balanced, bytes, 3);
  }
  // What a GEMV GEMM1 block's start costs the stream (kStartup): GEMM1's weights at T = 4 (16 slots) and
  // T = 16 (53 experts), 360 tiles each, 8 a block.
  std::printf("  a GEMM1 block's start (5 dependent loads, a barrier) against none:\n");
  for (const uint64_t tiles : {uint64_t{5760}, uint64_t{19080}}) {
    const uint64_t bytes = tiles * kTileBytes;
    run_ring<2, 2, true>(stream, buf, sms, "tiles", Mode::tiles, bytes, 3, 1);
    run_ring<2, 2, true, false, true>(stream, buf, sms, "tiles", Mode::tiles, bytes, 3, 1);
    run_ring<2, 2, true>(stream, buf, sms, "tiles", Mode::tiles, bytes, 3, 1);
    run_ring<2, 2, true, false, true>(stream, buf, sms, "tiles", Mode::tiles, bytes, 3, 1);
  }
  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaFree(buf.chain));
  CHECK(cudaFree(buf.a));
  CHECK(cudaFree(buf.b));
  CHECK(cudaFree(buf.sink));
  return 0;
}
