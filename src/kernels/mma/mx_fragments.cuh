#pragma once
// Register packing of the MX atoms (mx_atoms.cuh): the 8-bit operands of mma.sync m16n8k32 (PTX ISA,
// "Matrix Fragments for mma.m16n8k32", 8-bit types), g = lane / 4, t = lane % 4:
//   A (16x32, row): a0 = A(g, 4t..4t+3)  a1 = A(g+8, 4t..)  a2 = A(g, 16+4t..)  a3 = A(g+8, 16+4t..)
//   B (32x8,  col): b0 = B(k 4t..4t+3, n g)  b1 = B(k 16+4t.., n g)
//   C (16x8):       c0, c1 = (g, 2t..2t+1)  c2, c3 = (g+8, 2t..2t+1)
// byte j of a register is element j of its run. One MMA covers one MX block (K = 32): lane t gives
// word t of the block (elements 8t..8t+7) to K slots 4t..4t+3 and 16+4t..16+4t+3, in the order
// (3, 2, 7, 6) and (1, 0, 5, 4), for both operands, so A and B agree on every slot.
//
// The weights come from the GEMV layout's bit-scattered words (mx_decode.cuh), decoded to bf16
// patterns s<<15 | e1e0m<<6 and then moved to bytes: e4m3 bytes s<<7 | e1e0m<<2, which are the e2m1
// value times 2^-6 exactly (the emulated atom multiplies 2^6 back), or the e2m1 code in bits [5:2] of
// an 8-bit container, as kind::mxf8f6f4 wants it (the native atom). Host-callable: the CPU tests
// feed an emulation of the PTX fragment tables with these functions, the scale wiring below included.
#include <cstdint>

#include "layout/mx_decode.cuh"

namespace mxmoe::mma {

MXMOE_HD uint32_t byte_perm(uint32_t x, uint32_t y, uint32_t selector) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, y, selector);
#else
  const uint64_t bytes = (static_cast<uint64_t>(y) << 32) | x;
  uint32_t out = 0;
  for (int j = 0; j < 4; ++j) out |= static_cast<uint32_t>((bytes >> (8 * ((selector >> (4 * j)) & 7))) & 0xFF) << (8 * j);
  return out;
#endif
}

// 8 e4m3 activation codes of one word (elements 0..7 of it, in memory order: lo = 0..3, hi = 4..7)
// -> the registers of K slots 4t.. (first) and 16+4t.. (second).
MXMOE_HD void mx_act_slots(uint32_t lo, uint32_t hi, uint32_t& first, uint32_t& second) {
  first = byte_perm(lo, hi, 0x6723);   // elements 3, 2, 7, 6
  second = byte_perm(lo, hi, 0x4501);  // elements 1, 0, 5, 4
}

// One stored (bit-scattered) weight word -> the B registers of the same slots. kContainers: e2m1 in
// bits [5:2] of each byte (native); else e4m3 bytes worth the e2m1 value times 2^-6 (emulated).
template <bool kContainers>
MXMOE_HD void mx_weight_slots(uint32_t packed_word, uint32_t& first, uint32_t& second) {
  uint32_t p[4];  // bf16x2 patterns of elements (3,7), (2,6), (1,5), (0,4)
  kernels::decode_e2m1x8_packed(packed_word, p);
  uint32_t v[4];
  for (int j = 0; j < 4; ++j) {
    // low half -> byte 0, high half -> byte 2: magnitude bits 8:6 to 4:2, the sign to bit 7 or 5
    const uint32_t sign = kContainers ? (p[j] >> 10) & 0x00200020u : (p[j] >> 8) & 0x00800080u;
    v[j] = ((p[j] >> 4) & 0x001C001Cu) | sign;
  }
  first = v[0] | (v[1] << 8);   // elements 3, 2, 7, 6
  second = v[2] | (v[3] << 8);  // elements 1, 0, 5, 4
}

// The scale operands, as the MX GEMM kernel passes them (PTX ISA, "Block Scaling for mma.sync",
// scale_vec::1X with thread-id-a = thread-id-b = 0 in the instruction): the native atom reads SF_A of
// row m from lane 4 (m % 8) + m / 8 and SF_B of column n from lane 4 n. So lane (g, t = 0) passes row
// g's activation scale, lane (g, t = 1) row g+8's (the other lanes' are not read), and every lane of
// group g the scale of weight row g of the n8 group.
MXMOE_HD uint32_t native_scale_a(int t, uint32_t row_g, uint32_t row_g8) { return t == 0 ? row_g : row_g8; }
MXMOE_HD int native_scale_b_row(int g) { return g; }
// The emulated atom scales its own accumulators: lane (g, t) holds C columns 2t and 2t + 1, so it
// passes the scales of weight rows 2t + j (j = 0, 1) of the n8 group (and rows g, g+8's activation scales).
MXMOE_HD int emulated_scale_b_row(int t, int j) { return 2 * t + j; }

// The activation scale of row l (0..63) of half `half` of a 128-row group, k-block b (0..3) of the
// chunk, inside that chunk's 512 bytes of the swizzled layout (mxmoe/scale_layout.hpp, FACTS.md §4),
// which the kernel copies to shared memory as they are.
MXMOE_HD int act_scale_index(int half, int l, int b) {
  const int r = 64 * half + l;  // row inside the 128-row group
  return (r % 32) * 16 + (r / 32) * 4 + b;
}

}  // namespace mxmoe::mma
