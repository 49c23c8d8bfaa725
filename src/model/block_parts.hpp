// Pieces a transformer block's layers share (model/gpt.cpp, model/moe_block.cpp): element-wise
// copies and sums, and the seeding of a row-parallel layer's output.
#pragma once

#include <cstdint>

#include "core/bf16.hpp"
#include "core/types.hpp"
#include "parallel/tp_regions.hpp"

namespace mpf {

// Rows [first, first + count) of a (rows, width) tensor.
inline Tensor rows(const Tensor& t, int64_t first, int64_t count, int64_t width) {
  return Tensor(t.data() + first * width, count * width);
}
inline Tensor16 rows(const Tensor16& t, int64_t first, int64_t count, int64_t width) {
  return Tensor16(t.data() + first * width, count * width);
}

// y (n) += x (n).
void add_into(Tensor y, const float* x, int64_t n);
// y (n) = x (n).
void copy_into(Tensor y, const float* x, int64_t n);
void copy_into(Tensor16 y, const bf16* x, int64_t n);

// Seeds the output (R,C) of a row-parallel layer before the GEMM adds this rank's partial
// product: the rows this rank contributes the residual for get residual + bias, all others zero,
// so leaving the region (all-reduce, or reduce-scatter under SP) adds them exactly once. Without
// SP rank 0 seeds every row; with SP each rank seeds its own rows. An empty residual (a post-norm
// block's sublayer) seeds the bias only, an empty bias nothing more. Under seq.bf16 every row is
// zero: the sum crosses in bf16, and join_rows adds the residual and the bias after it.
void seed_rows(Tensor out, Tensor residual, Tensor bias, const tp::SequenceSplit& seq, int rank,
               int C);
// After leaving the region under seq.bf16: this rank's rows of the sum, out (local_rows, C), get
// the residual and the bias seed_rows left out, in fp32. Otherwise nothing.
void join_rows(Tensor out, Tensor residual, Tensor bias, const tp::SequenceSplit& seq, int C);

}  // namespace mpf
