#include "model/layers/linear.hpp"

#include "core/parallel.hpp"
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
}  // namespace

void linear_forward(Tensor out, Tensor residual, Tensor inp, Tensor weight, Tensor bias, int64_t N,
                    int IC, int OC) {
  const bool has_bias = bias.data() != nullptr, has_residual = residual.data() != nullptr;
  float beta = 0.0f;
  if (has_bias || has_residual) {
    // Seed the output with residual + bias, then let the GEMM accumulate onto it (beta = 1).
    for_rows(
        "mpf::linear_forward_seed", N, KOKKOS_LAMBDA(int64_t n) {
          for (int o = 0; o < OC; ++o) {
            out(n * OC + o) =
                (has_residual ? residual(n * OC + o) : 0.0f) + (has_bias ? bias(o) : 0.0f);
          }
        });
    beta = 1.0f;
  }
  product(out, inp, weight, N, IC, OC, beta);
}

void linear_forward_accumulate(Tensor out, Tensor inp, Tensor weight, int64_t N, int IC, int OC) {
  product(out, inp, weight, N, IC, OC, 1.0f);
}

void linear_backward_input(Tensor dinp, Tensor dout, Tensor weight, int64_t N, int IC, int OC) {
  matmul(Op::N, Op::N, N, IC, OC, 1.0f, dout.data(), OC, weight.data(), IC, 0.0f, dinp.data(), IC);
}

void linear_backward_weight(Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, int64_t N,
                            int IC, int OC) {
  matmul(Op::T, Op::N, OC, IC, N, 1.0f, dout.data(), OC, inp.data(), IC, 1.0f, dweight.data(), IC);
  if (dbias.data() == nullptr) return;
  // Column sums of dout in blocks of channels: contiguous inner loop, no write conflicts.
  constexpr int kBlock = 64;
  const int nblocks = (OC + kBlock - 1) / kBlock;
  for_rows(
      "mpf::linear_backward_bias", nblocks, KOKKOS_LAMBDA(int64_t blk) {
        const int o0 = blk * kBlock, o1 = o0 + kBlock < OC ? o0 + kBlock : OC;
        float acc[kBlock] = {};
        for (int64_t n = 0; n < N; ++n) {
          const float* dy = dout.data() + n * OC;
          for (int o = o0; o < o1; ++o) acc[o - o0] += dy[o];
        }
        for (int o = o0; o < o1; ++o) dbias(o) += acc[o - o0];
      });
}

}  // namespace mpf
