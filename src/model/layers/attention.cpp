#include "model/layers/attention.hpp"

#include <cmath>

#include "core/parallel.hpp"
#include "core/vector_math.hpp"
#include "model/layers/matmul.hpp"

namespace mpf {

void attention_forward(Tensor out, Tensor att, Tensor qkv, int B, int T, int C, int NH) {
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int64_t TT = int64_t(T) * T;
  // Every product below reads QKV (in bf16: rounded once, not per sequence).
  const HeldOperand qkv16(qkv.data(), int64_t(B) * T * C3);
  for (int b = 0; b < B; ++b) {
    const float* q = qkv.data() + int64_t(b) * T * C3;
    float* s = att.data() + int64_t(b) * NH * TT;
    // S_h (T,T) = Q_h · K_hᵀ for every head h of row b (the scale is applied by the softmax)
    matmul_strided_batched(Op::N, Op::T, T, T, hs, 1.0f, q, C3, hs, q + C, C3, hs, 0.0f, s, T, TT,
                           NH);
  }
  // Row-wise causal softmax of scale·S: row t of a head sees positions 0..t. The scale is applied
  // here, in fp32, rather than by the product, so that no product needs an alpha.
  for_rows(
      "mpf::attention_softmax", int64_t(B) * NH * T, T, KOKKOS_LAMBDA(const Row& r, int64_t row) {
        const int t = row % T;
        float* p = att.data() + row * T;
        const float mx = scale * r.max(t + 1, [p](int j) { return p[j]; });
        r.for_each(t + 1, [=](int j) { p[j] = vmath::exp(scale * p[j] - mx); });
        const float inv = 1.0f / r.sum(t + 1, [p](int j) { return p[j]; });
        r.for_each(t + 1, [=](int j) { p[j] *= inv; });
        r.for_each(T - t - 1, [=](int j) { p[t + 1 + j] = 0.0f; });
      });
  const HeldOperand att16(att.data(), int64_t(B) * NH * TT);
  for (int b = 0; b < B; ++b) {
    const float* v = qkv.data() + int64_t(b) * T * C3 + 2 * C;
    // out_h (T,hs) = P_h · V_h, written into columns h*hs.. of out (B,T,C)
    matmul_strided_batched(Op::N, Op::N, T, hs, T, 1.0f, att.data() + int64_t(b) * NH * TT, T, TT,
                           v, C3, hs, 0.0f, out.data() + int64_t(b) * T * C, C, hs, NH);
  }
}

void attention_backward_input(Tensor dqkv, Tensor datt, Tensor dout, Tensor qkv, Tensor att, int B,
                              int T, int C, int NH) {
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int64_t TT = int64_t(T) * T;
  const HeldOperand qkv16(qkv.data(), int64_t(B) * T * C3), att16(att.data(), int64_t(B) * NH * TT),
      dout16(dout.data(), int64_t(B) * T * C);
  for (int b = 0; b < B; ++b) {
    const float* q = qkv.data() + int64_t(b) * T * C3;
    const float* dy = dout.data() + int64_t(b) * T * C;
    const float* p = att.data() + int64_t(b) * NH * TT;
    float* dp = datt.data() + int64_t(b) * NH * TT;
    float* dq = dqkv.data() + int64_t(b) * T * C3;
    // dP_h = dOut_h · V_hᵀ;  dV_h = P_hᵀ · dOut_h
    matmul_strided_batched(Op::N, Op::T, T, T, hs, 1.0f, dy, C, hs, q + 2 * C, C3, hs, 0.0f, dp, T,
                           TT, NH);
    matmul_strided_batched(Op::T, Op::N, T, hs, T, 1.0f, p, T, TT, dy, C, hs, 0.0f, dq + 2 * C, C3,
                           hs, NH);
  }
  // Softmax backward in place, with the forward's scale: dS = scale · P ⊙ (dP − Σ_j P·dP), zero
  // outside the causal prefix.
  for_rows(
      "mpf::attention_softmax_backward", int64_t(B) * NH * T, T,
      KOKKOS_LAMBDA(const Row& r, int64_t row) {
        const int t = row % T;
        const float* p = att.data() + row * T;
        float* d = datt.data() + row * T;
        const float dot = r.sum(t + 1, [p, d](int j) { return p[j] * d[j]; });
        r.for_each(t + 1, [=](int j) { d[j] = scale * p[j] * (d[j] - dot); });
        r.for_each(T - t - 1, [=](int j) { d[t + 1 + j] = 0.0f; });
      });
  const HeldOperand ds16(datt.data(), int64_t(B) * NH * TT);
  for (int b = 0; b < B; ++b) {
    const float* q = qkv.data() + int64_t(b) * T * C3;
    const float* ds = datt.data() + int64_t(b) * NH * TT;
    float* dq = dqkv.data() + int64_t(b) * T * C3;
    // dQ_h = dS_h · K_h;  dK_h = dS_hᵀ · Q_h
    matmul_strided_batched(Op::N, Op::N, T, hs, T, 1.0f, ds, T, TT, q + C, C3, hs, 0.0f, dq, C3, hs,
                           NH);
    matmul_strided_batched(Op::T, Op::N, T, hs, T, 1.0f, ds, T, TT, q, C3, hs, 0.0f, dq + C, C3, hs,
                           NH);
  }
}

}  // namespace mpf
