#include "model/block_parts.hpp"

#include "core/parallel.hpp"

namespace mpf {

void add_into(Tensor y, const float* x, int64_t n) {
  for_each(
      "mpf::add_into", n, KOKKOS_LAMBDA(int64_t i) { y(i) += x[i]; });
}

void copy_into(Tensor y, const float* x, int64_t n) {
  for_each(
      "mpf::copy_into", n, KOKKOS_LAMBDA(int64_t i) { y(i) = x[i]; });
}

void copy_into(Tensor16 y, const bf16* x, int64_t n) {
  for_each(
      "mpf::copy_into", n, KOKKOS_LAMBDA(int64_t i) { y(i) = x[i]; });
}

void seed_rows(Tensor out, Tensor residual, Tensor bias, const tp::SequenceSplit& seq, int rank,
               int C) {
  const int64_t first = seq.on ? seq.row_begin : 0;
  const int64_t count = seq.bf16 ? 0 : seq.on ? seq.local_rows : (rank == 0 ? seq.rows : 0);
  const bool has_bias = bias.extent(0) > 0;  // Llama's projections have none
  const bool has_residual = residual.extent(0) > 0;
  for_each_2d(
      "mpf::seed_rows", seq.rows, C, KOKKOS_LAMBDA(int64_t n, int c) {
        const bool mine = n >= first && n < first + count;
        const float r = has_residual && mine ? residual((n - first) * C + c) : 0.0f;
        out(n * C + c) = mine ? r + (has_bias ? bias(c) : 0.0f) : 0.0f;
      });
}

void join_rows(Tensor out, Tensor residual, Tensor bias, const tp::SequenceSplit& seq, int C) {
  const bool has_bias = bias.extent(0) > 0;
  const bool has_residual = residual.extent(0) > 0;
  if (!seq.bf16 || !(has_bias || has_residual)) return;
  for_each_2d(
      "mpf::join_rows", seq.local_rows, C, KOKKOS_LAMBDA(int64_t n, int c) {
        const int64_t i = n * C + c;
        out(i) += (has_residual ? residual(i) : 0.0f) + (has_bias ? bias(c) : 0.0f);
      });
}

}  // namespace mpf
