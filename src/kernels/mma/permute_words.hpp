#pragma once
// The swap-AB tiles' activations in the Bf16Atom's K order: every 8-element word (one stored e2m1
// word's K range) rewritten from elements 0..7 to the decode's pair order (3,7), (2,6), (1,5), (0,4)
// (act_stage.cuh), so the tile reads each MMA's B fragment with one shared-memory load and no byte
// permutes. GEMM1's input is permuted by this pass; GEMM2's is written permuted by GEMM1's epilogue.
#include <cuda_runtime.h>

#include <cstdint>

namespace mxmoe::mma {

// The position of natural element e (0..7) of a word in the permuted word (constexpr: device code
// calls it through --expt-relaxed-constexpr).
constexpr int permuted_position(int e) { return 2 * (3 - (e & 3)) + (e >> 2); }
static_assert(permuted_position(3) == 0 && permuted_position(7) == 1 && permuted_position(2) == 2 &&
                  permuted_position(6) == 3 && permuted_position(1) == 4 && permuted_position(5) == 5 &&
                  permuted_position(0) == 6 && permuted_position(4) == 7,
              "pairs (3,7), (2,6), (1,5), (0,4), low element first");

// out[i] = in[i] permuted word by word; `elements` is a multiple of 8, both 16-byte aligned.
// Launched with programmatic dependent launch (it waits for its predecessor before reading).
void permute_words(const uint16_t* in, uint16_t* out, int64_t elements, cudaStream_t stream);

}  // namespace mxmoe::mma
