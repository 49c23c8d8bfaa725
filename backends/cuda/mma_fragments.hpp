// Where the operands of one warp-wide tensor-core product live: for
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (sm_80 and later), which (row, column) of
// A (16 x 16), B (16 x 8) and C/D (16 x 8) each lane's registers hold, as the PTX ISA's figures
// "Matrix Fragments for mma.m16n8k16 with floating point type" give them. With
// group = lane / 4 and quad_lane = lane % 4:
//   A: 8 bf16 a0..a7 in 4 32-bit registers (a0 in the low half of the first);
//      rows group (a0, a1, a4, a5) and group + 8 (a2, a3, a6, a7),
//      columns 2·quad_lane + (i & 1), plus 8 for a4..a7;
//   B: 4 bf16 b0..b3 in 2 registers; rows (k) 2·quad_lane + (i & 1), plus 8 for b2, b3;
//      column (n) group;
//   C, D: 4 floats c0..c3; rows group (c0, c1) and group + 8 (c2, c3); columns 2·quad_lane + (i &
//   1).
// Plain constexpr functions, so the CUDA kernel (flash_attention_mma.cu) and the host emulation
// that tests its indexing (tests/unit/test_mma_fragments.cpp) read one definition.
#pragma once

#if defined(__CUDACC__)
#define MPF_MMA_HD __host__ __device__
#else
#define MPF_MMA_HD
#endif

namespace mpf::mma {

constexpr int kWarp = 32;
constexpr int kM = 16, kN = 8, kK = 16;
// Elements per lane: A and B are bf16 two to a 32-bit register, C/D floats one to a register.
constexpr int kAElems = 8, kBElems = 4, kCElems = 4;

MPF_MMA_HD constexpr int group_of(int lane) {
  return lane >> 2;
}
MPF_MMA_HD constexpr int quad_lane_of(int lane) {
  return lane & 3;
}

MPF_MMA_HD constexpr int a_row(int lane, int i) {
  return group_of(lane) + ((i & 2) ? 8 : 0);
}
MPF_MMA_HD constexpr int a_col(int lane, int i) {
  return 2 * quad_lane_of(lane) + (i & 1) + ((i & 4) ? 8 : 0);
}
MPF_MMA_HD constexpr int b_row(int lane, int i) {
  return 2 * quad_lane_of(lane) + (i & 1) + ((i & 2) ? 8 : 0);
}
MPF_MMA_HD constexpr int b_col(int lane, int /*i*/) {
  return group_of(lane);
}
MPF_MMA_HD constexpr int c_row(int lane, int i) {
  return group_of(lane) + ((i & 2) ? 8 : 0);
}
MPF_MMA_HD constexpr int c_col(int lane, int i) {
  return 2 * quad_lane_of(lane) + (i & 1);
}

// A product's result reused as the next product's A without leaving the registers
// (FlashAttention-2's P·V): the 16 columns of A element i of a k-step are the C tiles 2k and
// 2k + 1 side by side, and the lane that holds A element i holds it as element c_index_for_a(i)
// of C tile 2k + c_tile_for_a(i).
MPF_MMA_HD constexpr int c_tile_for_a(int i) {
  return i >> 2;
}
MPF_MMA_HD constexpr int c_index_for_a(int i) {
  return i & 3;
}

// The lanes that share a row of C (and of A): the 4 of a group, lane ^ 1 and lane ^ 2 — the
// shuffle distances of a row's max and sum.
constexpr int kRowShuffles[2] = {1, 2};

}  // namespace mpf::mma
