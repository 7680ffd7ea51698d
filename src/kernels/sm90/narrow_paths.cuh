#pragma once
// The narrower wgmma paths of the sm90 tiles (wgmma_tile.cuh, wgmma_fp8_tile.cuh): an m-tile with fewer
// rows than its tile runs the narrowest wgmma that covers them, loading only the rows it reads. A shape
// S names its paths: S::kNarrowPaths of them, S::narrow_n(p) the width of path p (narrowest first), and
// S::path_n(p) that width or, for p == kNarrowPaths, the tile's own.
#include <type_traits>

namespace mxmoe::sm90 {

// S::kNarrowPaths at most, in every tile shape (the launches' maps hold one per path).
inline constexpr int kMaxNarrowPaths = 5;

// The narrowest path of shape S whose width covers `rows`.
template <class S>
__device__ __forceinline__ int narrowest_path(int rows) {
  int path = S::kNarrowPaths;
#pragma unroll
  for (int p = S::kNarrowPaths - 1; p >= 0; --p)
    if (rows <= S::narrow_n(p)) path = p;
  return path;
}

// f(std::integral_constant<int, N>) with N the width of `path` (a branch per narrower path).
template <class S, int kPath = 0, class F>
__device__ __forceinline__ void with_path_width(int path, F&& f) {
  if constexpr (kPath < S::kNarrowPaths)
    if (path != kPath) return with_path_width<S, kPath + 1>(path, f);
  f(std::integral_constant<int, S::path_n(kPath)>{});
}

}  // namespace mxmoe::sm90
