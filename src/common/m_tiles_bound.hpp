#pragma once
// How many m-tiles a grouped launch can have (m_tiles.cuh cuts each active expert's rows into tiles of
// block_m rows): host code (launchers, the planner) sizes grids with it.
#include <cstdint>

namespace mxmoe::routing {

// At most pairs / block_m + (experts with rows): launch that many.
inline int64_t m_tiles_bound(int64_t pairs, int64_t max_active, int block_m) { return pairs / block_m + max_active; }

}  // namespace mxmoe::routing
