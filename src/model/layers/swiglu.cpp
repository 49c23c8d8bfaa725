#include "model/layers/swiglu.hpp"

#include "core/parallel.hpp"
#include "core/vector_math.hpp"

namespace mpf {

namespace {
// sigmoid(x) = 1/(1 + e^-x) with the branch-free exp, so the row loops vectorize (as GELU's tanh).
KOKKOS_INLINE_FUNCTION float swiglu_sigmoid(float x) {
  return 1.0f / (1.0f + vmath::exp(-x));
}

// Out and In: Tensor, or Tensor16 for a tensor kept in bf16 (put rounds, get widens).
template <class Out, class In>
void swiglu_into(Out out, In inp, int64_t N, int F) {
  for_each_2d(
      "mpf::swiglu_forward", N, F, KOKKOS_LAMBDA(int64_t n, int f) {
        const float g = get(inp, n * 2 * F + f), u = get(inp, n * 2 * F + F + f);
        put(out, n * F + f, g * swiglu_sigmoid(g) * u);
      });
}
}  // namespace

void swiglu_forward(Tensor out, Tensor inp, int64_t N, int F) {
  swiglu_into(out, inp, N, F);
}

void swiglu_forward(Tensor16 out, Tensor inp, int64_t N, int F) {
  swiglu_into(out, inp, N, F);
}

void swiglu_forward(Tensor16 out, Tensor16 inp, int64_t N, int F) {
  swiglu_into(out, inp, N, F);
}

namespace {
template <class In>
void swiglu_backward_into(Tensor dinp, Tensor dout, In inp, int64_t N, int F) {
  for_each_2d(
      "mpf::swiglu_backward_input", N, F, KOKKOS_LAMBDA(int64_t n, int f) {
        const float g = get(inp, n * 2 * F + f), u = get(inp, n * 2 * F + F + f);
        const float dy = dout(n * F + f);
        const float sg = swiglu_sigmoid(g);
        // silu'(g) = sigmoid(g) · (1 + g · (1 − sigmoid(g)))
        dinp(n * 2 * F + f) = dy * u * sg * (1.0f + g * (1.0f - sg));
        dinp(n * 2 * F + F + f) = dy * g * sg;
      });
}
}  // namespace

void swiglu_backward_input(Tensor dinp, Tensor dout, Tensor inp, int64_t N, int F) {
  swiglu_backward_into(dinp, dout, inp, N, F);
}

void swiglu_backward_input(Tensor dinp, Tensor dout, Tensor16 inp, int64_t N, int F) {
  swiglu_backward_into(dinp, dout, inp, N, F);
}

}  // namespace mpf
