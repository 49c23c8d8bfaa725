#include "model/layers/gated_rows.hpp"

#include <cmath>

#include "core/parallel.hpp"

namespace mpf {

void sigmoid_gate_forward(Tensor gate, int64_t R) {
  for_each(
      "mpf::sigmoid_gate_forward", R,
      KOKKOS_LAMBDA(int64_t r) { gate(r) = 1.0f / (1.0f + expf(-gate(r))); });
}

namespace {
// The gate as the product with y reads it, and the gated value: a y kept in bf16 is gated as
// autocast gates a bf16 tensor (Qwen2-MoE's `sigmoid(gate) * shared_expert_output`), the gate cast
// to bf16 and the product rounded, then added in fp32.
KOKKOS_INLINE_FUNCTION float gate_for(float g, float) {
  return g;
}
KOKKOS_INLINE_FUNCTION float gate_for(float g, bf16) {
  return from_bf16(to_bf16(g));
}
KOKKOS_INLINE_FUNCTION float gated_value(float g, float y) {
  return g * y;
}
KOKKOS_INLINE_FUNCTION float gated_value(float g, bf16 y) {
  return from_bf16(to_bf16(gate_for(g, y) * from_bf16(y)));
}

// Y: Tensor, or Tensor16 for a y kept in bf16.
template <class Y>
void add_gated(Tensor out, Y y, Tensor gate, int64_t R, int C) {
  for_each_2d(
      "mpf::add_gated_rows", R, C,
      KOKKOS_LAMBDA(int64_t r, int c) { out(r * C + c) += gated_value(gate(r), y(r * C + c)); });
}

template <class Y>
void gated_backward(Tensor dgate, Tensor dy, Tensor dout, Y y, Tensor gate, int64_t R, int C) {
  for_rows(
      "mpf::gated_rows_dgate", R, C, KOKKOS_LAMBDA(const Row& row, int64_t r) {
        const float* a = dout.data() + r * C;
        const int64_t first = r * C;
        const float dot = row.sum(C, [a, y, first](int c) { return a[c] * get(y, first + c); });
        row.once([=] { dgate(r) = dot; });
      });
  for_each_2d(
      "mpf::gated_rows_dy", R, C, KOKKOS_LAMBDA(int64_t r, int c) {
        dy(r * C + c) = gate_for(gate(r), y(r * C + c)) * dout(r * C + c);
      });
}
}  // namespace

void add_gated_rows(Tensor out, Tensor y, Tensor gate, int64_t R, int C) {
  add_gated(out, y, gate, R, C);
}

void add_gated_rows(Tensor out, Tensor16 y, Tensor gate, int64_t R, int C) {
  add_gated(out, y, gate, R, C);
}

void gated_rows_backward(Tensor dgate, Tensor dy, Tensor dout, Tensor y, Tensor gate, int64_t R,
                         int C) {
  gated_backward(dgate, dy, dout, y, gate, R, C);
}

void gated_rows_backward(Tensor dgate, Tensor dy, Tensor dout, Tensor16 y, Tensor gate, int64_t R,
                         int C) {
  gated_backward(dgate, dy, dout, y, gate, R, C);
}

void sigmoid_gate_backward(Tensor dgate, Tensor gate, int64_t R) {
  for_each(
      "mpf::sigmoid_gate_backward", R,
      KOKKOS_LAMBDA(int64_t r) { dgate(r) *= gate(r) * (1.0f - gate(r)); });
}

}  // namespace mpf
