#include "model/layers/linear.hpp"

#include "core/parallel.hpp"
#include "model/layers/gelu.hpp"
#include "model/layers/matmul.hpp"

namespace mpf {

namespace {
// out (N,OC) = inp (N,IC) · weightᵀ + beta · out, in the run's precision. One row (a generated
// token) is a matrix-vector product: a gemm would repack the whole weight for it (4-7x slower
// here); generation runs in fp32.
void product(Tensor out, Tensor inp, Tensor weight, int64_t N, int IC, int OC, float beta) {
  if (N == 1) {
    backend::gemv(Op::N, OC, IC, 1.0f, weight.data(), IC, inp.data(), beta, out.data());
  } else {
    matmul(Op::N, Op::T, N, OC, IC, 1.0f, inp.data(), IC, weight.data(), IC, beta, out.data(), OC);
  }
}
// An input kept in bf16 is only ever a product's (no one-row fp32 path).
void product(Tensor out, Tensor16 inp, Tensor weight, int64_t N, int IC, int OC, float beta) {
  matmul(Op::N, Op::T, N, OC, IC, 1.0f, inp.data(), IC, weight.data(), IC, beta, out.data(), OC);
}

template <class In>
void linear_into(Tensor out, Tensor residual, In inp, Tensor weight, Tensor bias, int64_t N, int IC,
                 int OC) {
  const bool has_bias = bias.data() != nullptr, has_residual = residual.data() != nullptr;
  float beta = 0.0f;
  if (has_bias || has_residual) {
    // Seed the output with residual + bias, then let the GEMM accumulate onto it (beta = 1).
    for_each_2d(
        "mpf::linear_forward_seed", N, OC, KOKKOS_LAMBDA(int64_t n, int o) {
          out(n * OC + o) =
              (has_residual ? residual(n * OC + o) : 0.0f) + (has_bias ? bias(o) : 0.0f);
        });
    beta = 1.0f;
  }
  product(out, inp, weight, N, IC, OC, beta);
}

template <class Out, class In>
void linear_gelu_into(Tensor pre, Out out, In inp, Tensor weight, Tensor bias, int64_t N, int IC,
                      int OC) {
  if (!device_shaped()) {
    linear_into(pre, Tensor(), inp, weight, bias, N, IC, OC);
    gelu_forward(out, pre, N * OC);
    return;
  }
  // On a GPU the bias joins GELU's pass: the product writes its output without reading it, and
  // one pass adds the bias and applies GELU (4 passes over (N,OC) become 3).
  product(pre, inp, weight, N, IC, OC, 0.0f);
  bias_gelu_forward(out, pre, bias, N, OC);
}

template <class In>
void linear_weight_grad(Tensor dweight, Tensor dbias, Tensor dout, In inp, int64_t N, int IC,
                        int OC) {
  matmul(Op::T, Op::N, OC, IC, N, 1.0f, dout.data(), OC, inp.data(), IC, 1.0f, dweight.data(), IC);
  if (dbias.data() == nullptr) return;
  add_column_sums<1>(
      "mpf::linear_backward_bias", N, OC,
      KOKKOS_LAMBDA(int64_t n, int o, float* v) { v[0] = dout(n * OC + o); },
      ColumnSums<1>{{dbias.data()}});
}
}  // namespace

void linear_forward(Tensor out, Tensor residual, Tensor inp, Tensor weight, Tensor bias, int64_t N,
                    int IC, int OC) {
  linear_into(out, residual, inp, weight, bias, N, IC, OC);
}

void linear_forward(Tensor out, Tensor residual, Tensor16 inp, Tensor weight, Tensor bias,
                    int64_t N, int IC, int OC) {
  linear_into(out, residual, inp, weight, bias, N, IC, OC);
}

void linear_gelu_forward(Tensor pre, Tensor out, Tensor inp, Tensor weight, Tensor bias, int64_t N,
                         int IC, int OC) {
  linear_gelu_into(pre, out, inp, weight, bias, N, IC, OC);
}

void linear_gelu_forward(Tensor pre, Tensor16 out, Tensor16 inp, Tensor weight, Tensor bias,
                         int64_t N, int IC, int OC) {
  linear_gelu_into(pre, out, inp, weight, bias, N, IC, OC);
}

void linear_forward_accumulate(Tensor out, Tensor inp, Tensor weight, int64_t N, int IC, int OC) {
  product(out, inp, weight, N, IC, OC, 1.0f);
}

void linear_forward_accumulate(Tensor out, Tensor16 inp, Tensor weight, int64_t N, int IC, int OC) {
  product(out, inp, weight, N, IC, OC, 1.0f);
}

void linear_backward_input(Tensor dinp, Tensor dout, Tensor weight, int64_t N, int IC, int OC) {
  matmul(Op::N, Op::N, N, IC, OC, 1.0f, dout.data(), OC, weight.data(), IC, 0.0f, dinp.data(), IC);
}

void linear_backward_weight(Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, int64_t N,
                            int IC, int OC) {
  linear_weight_grad(dweight, dbias, dout, inp, N, IC, OC);
}

void linear_backward_weight(Tensor dweight, Tensor dbias, Tensor dout, Tensor16 inp, int64_t N,
                            int IC, int OC) {
  linear_weight_grad(dweight, dbias, dout, inp, N, IC, OC);
}

void linear_forward(Tensor16 out, Tensor inp, Tensor weight, int64_t N, int IC, int OC) {
  matmul(Op::N, Op::T, N, OC, IC, 1.0f, inp.data(), IC, weight.data(), IC, out.data(), OC);
}

void linear_forward(Tensor16 out, Tensor16 inp, Tensor weight, int64_t N, int IC, int OC) {
  matmul(Op::N, Op::T, N, OC, IC, 1.0f, inp.data(), IC, weight.data(), IC, out.data(), OC);
}

void linear_backward_input(Tensor dinp, Tensor16 dout, Tensor weight, int64_t N, int IC, int OC) {
  matmul(Op::N, Op::N, N, IC, OC, 1.0f, dout.data(), OC, weight.data(), IC, 0.0f, dinp.data(), IC);
}

void linear_backward_weight(Tensor dweight, Tensor16 dout, Tensor inp, int64_t N, int IC, int OC) {
  matmul(Op::T, Op::N, OC, IC, N, 1.0f, dout.data(), OC, inp.data(), IC, 1.0f, dweight.data(), IC);
}

}  // namespace mpf
