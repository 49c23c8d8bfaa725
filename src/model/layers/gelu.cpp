#include "model/layers/gelu.hpp"

#include <cmath>

#include "core/parallel.hpp"
#include "core/vector_math.hpp"

namespace mpf {

namespace {
constexpr float kScale = 0.7978845608028654f;  // √(2/π)
constexpr float kCube = 0.044715f;

KOKKOS_INLINE_FUNCTION float gelu(float x) {
  return 0.5f * x * (1.0f + vmath::tanh(kScale * (x + kCube * x * x * x)));
}

// Out and In: Tensor, or Tensor16 for a tensor kept in bf16 (put rounds, get widens).
template <class Out, class In>
void gelu_into(Out out, In inp, int64_t N) {
  for_each(
      "mpf::gelu_forward", N, KOKKOS_LAMBDA(int64_t i) { put(out, i, gelu(get(inp, i))); });
}

template <class Out>
void bias_gelu_into(Out out, Tensor inp, Tensor bias, int64_t N, int C) {
  for_each_2d(
      "mpf::bias_gelu_forward", N, C, KOKKOS_LAMBDA(int64_t n, int c) {
        const float x = inp(n * C + c) + bias(c);
        inp(n * C + c) = x;
        put(out, n * C + c, gelu(x));
      });
}
}  // namespace

void gelu_forward(Tensor out, Tensor inp, int64_t N) {
  gelu_into(out, inp, N);
}

void gelu_forward(Tensor16 out, Tensor inp, int64_t N) {
  gelu_into(out, inp, N);
}

void gelu_forward(Tensor16 out, Tensor16 inp, int64_t N) {
  gelu_into(out, inp, N);
}

void bias_gelu_forward(Tensor out, Tensor inp, Tensor bias, int64_t N, int C) {
  bias_gelu_into(out, inp, bias, N, C);
}

void bias_gelu_forward(Tensor16 out, Tensor inp, Tensor bias, int64_t N, int C) {
  bias_gelu_into(out, inp, bias, N, C);
}

namespace {
template <class In>
void gelu_backward_into(Tensor dinp, Tensor dout, In inp, int64_t N) {
  for_each(
      "mpf::gelu_backward_input", N, KOKKOS_LAMBDA(int64_t i) {
        const float x = get(inp, i);
        const float th = vmath::tanh(kScale * (x + kCube * x * x * x));
        const float sech2 = 1.0f - th * th;  // d tanh(u)/du, without cosh's overflow
        const float grad =
            0.5f * (1.0f + th) + 0.5f * x * sech2 * kScale * (1.0f + 3.0f * kCube * x * x);
        dinp(i) = grad * dout(i);
      });
}
}  // namespace

void gelu_backward_input(Tensor dinp, Tensor dout, Tensor inp, int64_t N) {
  gelu_backward_into(dinp, dout, inp, N);
}

void gelu_backward_input(Tensor dinp, Tensor dout, Tensor16 inp, int64_t N) {
  gelu_backward_into(dinp, dout, inp, N);
}

}  // namespace mpf
