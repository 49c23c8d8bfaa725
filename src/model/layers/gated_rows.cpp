#include "model/layers/gated_rows.hpp"

#include <cmath>

#include "core/parallel.hpp"

namespace mpf {

void sigmoid_gate_forward(Tensor gate, int64_t R) {
  for_each(
      "mpf::sigmoid_gate_forward", R,
      KOKKOS_LAMBDA(int64_t r) { gate(r) = 1.0f / (1.0f + expf(-gate(r))); });
}

void add_gated_rows(Tensor out, Tensor y, Tensor gate, int64_t R, int C) {
  for_each_2d(
      "mpf::add_gated_rows", R, C,
      KOKKOS_LAMBDA(int64_t r, int c) { out(r * C + c) += gate(r) * y(r * C + c); });
}

void gated_rows_backward(Tensor dgate, Tensor dy, Tensor dout, Tensor y, Tensor gate, int64_t R,
                         int C) {
  for_rows(
      "mpf::gated_rows_dgate", R, C, KOKKOS_LAMBDA(const Row& row, int64_t r) {
        const float* a = dout.data() + r * C;
        const float* b = y.data() + r * C;
        const float dot = row.sum(C, [a, b](int c) { return a[c] * b[c]; });
        row.once([=] { dgate(r) = dot; });
      });
  for_each_2d(
      "mpf::gated_rows_dy", R, C,
      KOKKOS_LAMBDA(int64_t r, int c) { dy(r * C + c) = gate(r) * dout(r * C + c); });
}

void sigmoid_gate_backward(Tensor dgate, Tensor gate, int64_t R) {
  for_each(
      "mpf::sigmoid_gate_backward", R,
      KOKKOS_LAMBDA(int64_t r) { dgate(r) *= gate(r) * (1.0f - gate(r)); });
}

}  // namespace mpf
