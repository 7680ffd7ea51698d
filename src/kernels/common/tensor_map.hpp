#pragma once
// Tiled TMA descriptors (CUtensorMap) for cp.async.bulk.tensor (tma.cuh). They are built on the host by
// the driver's cuTensorMapEncodeTiled, reached through the runtime's driver entry point so that the
// library links no libcuda. A descriptor holds the global address, so one is built per launch (a
// host-only call of about a microsecond; it is a kernel parameter, so graph capture keeps it).
#include <cuda.h>

#include <cstdint>
#include <span>

namespace mxmoe::kernels {

// dims: extents, innermost first (elements); strides: bytes from one index of dims[i + 1] to the next
// (rank - 1 of them, multiples of 16); box: the tile one copy moves (elements, each <= 256). Zero fill
// outside the extents. `what` names the tensor in errors (mxmoe::Error).
CUtensorMap encode_tiled_map(const char* what, CUtensorMapDataType type, const void* base,
                             std::span<const uint64_t> dims, std::span<const uint64_t> strides,
                             std::span<const uint32_t> box, CUtensorMapSwizzle swizzle);

}  // namespace mxmoe::kernels
