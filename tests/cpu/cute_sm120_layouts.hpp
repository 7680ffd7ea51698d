#pragma once
// CuTe's TV layouts of the SM120 block-scaled MMA m16n8k32 (kind::mxf8f6f4, scale_vec::1X), restated
// as numbers from CUTLASS 4.7.0 (NVIDIA/cutlass 7107b05535f8977f5ecb9d01ee203205b1fd9bc4), with a small
// evaluator of a CuTe Layout given as nested shape and stride: (thread, value) -> (row, column) of a
// column-major tile. test_mx_atom_cute.cpp checks the MX atoms' register packing against them.
#include <array>
#include <cstddef>
#include <initializer_list>
#include <vector>

namespace mxmoe::test::cute {

// A CuTe IntTuple: an integer or a tuple of them, nested.
struct IntTuple {
  int leaf = 0;
  std::vector<IntTuple> modes;
  IntTuple(int x) : leaf(x) {}  // NOLINT: written like CuTe's _4
  IntTuple(std::initializer_list<IntTuple> m) : modes(m) {}
};

inline int tuple_size(const IntTuple& shape) {
  if (shape.modes.empty()) return shape.leaf;
  int n = 1;
  for (const IntTuple& m : shape.modes) n *= tuple_size(m);
  return n;
}

// A 1-D index into a shape, split colexicographically (first mode fastest), dotted with the stride.
inline int evaluate(const IntTuple& shape, const IntTuple& stride, int index) {
  if (shape.modes.empty()) return index * stride.leaf;
  int offset = 0;
  for (size_t i = 0; i < shape.modes.size(); ++i) {
    const int n = tuple_size(shape.modes[i]);
    offset += evaluate(shape.modes[i], stride.modes[i], index % n);
    index /= n;
  }
  return offset;
}

// A CuTe TV layout (thread, value) -> (row, col) of a column-major rows x cols tile.
struct TvLayout {
  IntTuple shape, stride;
  int rows;
  int threads() const { return tuple_size(shape.modes[0]); }
  int values() const { return tuple_size(shape.modes[1]); }
  std::array<int, 2> operator()(int thread, int value) const {
    const int off = evaluate(shape.modes[0], stride.modes[0], thread) + evaluate(shape.modes[1], stride.modes[1], value);
    return {off % rows, off / rows};
  }
  // The thread's coordinate in the thread sub-mode of stride 0 (the replicated copies; the instruction's
  // thread-id selects one): CuTe's "Effectively 16 threads due to the 2:0 mode". 0 where there is none.
  int replica(int thread) const {
    const IntTuple& s = shape.modes[0];
    for (size_t i = 0; i < s.modes.size(); ++i) {
      const int n = tuple_size(s.modes[i]);
      if (stride.modes[0].modes[i].leaf == 0 && n > 1) return thread % n;
      thread /= n;
    }
    return 0;
  }
};

// Layout<Shape<...>, Stride<...>> of the headers: include/cute/atom/mma_traits_sm80.hpp (A, B, C, which
// MMA_Traits<SM120_16x8x32_TN> inherit) and include/cute/atom/mma_traits_sm120.hpp (SFA, SFB).
// MMA_Traits<SM80_16x8x32_S32S8S8S32_TN>::ALayout, (T32,V16) -> (M16,K32)
inline const TvLayout kCuteA{{{4, 8}, {4, 2, 2}}, {{64, 1}, {16, 8, 256}}, 16};
// MMA_Traits<SM80_16x8x32_S32S8S8S32_TN>::BLayout, (T32,V8) -> (N8,K32)
inline const TvLayout kCuteB{{{4, 8}, {4, 2}}, {{32, 1}, {8, 128}}, 8};
// SM80_16x8_Row, (T32,V4) -> (M16,N8)
inline const TvLayout kCuteC{{{4, 8}, {2, 2}}, {{32, 1}, {16, 8}}, 16};
// MMA_Traits<SM120_16x8x32_TN_VS<...>>::SFALayout, (T32,V32) -> (M16,K32)
inline const TvLayout kCuteSfa{{{2, 2, 8}, 32}, {{8, 0, 1}, 16}, 16};
// MMA_Traits<SM120_16x8x32_TN_VS<...>>::SFBLayout, (T32,V32) -> (N8,K32)
inline const TvLayout kCuteSfb{{{4, 8}, 32}, {{0, 1}, 8}, 8};

}  // namespace mxmoe::test::cute
