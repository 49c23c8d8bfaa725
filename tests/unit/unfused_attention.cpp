// The attention the fused kernel replaced, kept as its oracle: the (B, NH, T, T) scores through
// the backend's strided batched products, a row-wise softmax, and the products back.
#include "unfused_attention.hpp"

#include <cmath>

#include "core/parallel.hpp"
#include "core/vector_math.hpp"
#include "model/layers/matmul.hpp"

namespace mpf::test {

// Grouped heads: query head h = kv·G + g (G = NH/KVH) reads KV head kv. A product runs, for one g,
// the KVH heads g, G + g, 2G + g, ... as one strided batch: their Q columns are G·hs apart, their
// KV heads' hs apart, their T×T blocks of att G·T² apart. With KVH = NH (G = 1) it is one batch of
// every head, the same call as multi-head attention's.
void unfused_attention_forward(Tensor out, Tensor att, Tensor qkv, int B, int T, int NH, int KVH,
                               int hs) {
  const int G = NH / KVH, W = (NH + 2 * KVH) * hs, Cq = NH * hs;
  const int64_t k_col = int64_t(NH) * hs, v_col = int64_t(NH + KVH) * hs;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int64_t TT = int64_t(T) * T;
  // Every product below reads QKV (in bf16: rounded once, not per sequence).
  const HeldOperand qkv16(qkv.data(), int64_t(B) * T * W);
  for (int b = 0; b < B; ++b) {
    const float* q = qkv.data() + int64_t(b) * T * W;
    float* s = att.data() + int64_t(b) * NH * TT;
    // S_h (T,T) = Q_h · K_kvᵀ for every head h of row b (the scale is applied by the softmax)
    for (int g = 0; g < G; ++g) {
      matmul_strided_batched(Op::N, Op::T, T, T, hs, 1.0f, q + g * hs, W, int64_t(G) * hs,
                             q + k_col, W, hs, 0.0f, s + g * TT, T, G * TT, KVH);
    }
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
    const float* v = qkv.data() + int64_t(b) * T * W + v_col;
    const float* p = att.data() + int64_t(b) * NH * TT;
    float* y = out.data() + int64_t(b) * T * Cq;
    // out_h (T,hs) = P_h · V_kv, written into columns h·hs.. of out (B,T,NH·hs)
    for (int g = 0; g < G; ++g) {
      matmul_strided_batched(Op::N, Op::N, T, hs, T, 1.0f, p + g * TT, T, G * TT, v, W, hs, 0.0f,
                             y + g * hs, Cq, int64_t(G) * hs, KVH);
    }
  }
}

void unfused_attention_backward_input(Tensor dqkv, Tensor datt, Tensor dout, Tensor qkv, Tensor att,
                                      int B, int T, int NH, int KVH, int hs) {
  const int G = NH / KVH, W = (NH + 2 * KVH) * hs, Cq = NH * hs;
  const int64_t k_col = int64_t(NH) * hs, v_col = int64_t(NH + KVH) * hs;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int64_t TT = int64_t(T) * T;
  const HeldOperand qkv16(qkv.data(), int64_t(B) * T * W), att16(att.data(), int64_t(B) * NH * TT),
      dout16(dout.data(), int64_t(B) * T * Cq);
  for (int b = 0; b < B; ++b) {
    const float* q = qkv.data() + int64_t(b) * T * W;
    const float* dy = dout.data() + int64_t(b) * T * Cq;
    const float* p = att.data() + int64_t(b) * NH * TT;
    float* dp = datt.data() + int64_t(b) * NH * TT;
    float* dq = dqkv.data() + int64_t(b) * T * W;
    // dP_h = dOut_h · V_kvᵀ;  dV_kv = Σ_g P_hᵀ · dOut_h over the group, g ascending
    for (int g = 0; g < G; ++g) {
      matmul_strided_batched(Op::N, Op::T, T, T, hs, 1.0f, dy + g * hs, Cq, int64_t(G) * hs,
                             q + v_col, W, hs, 0.0f, dp + g * TT, T, G * TT, KVH);
    }
    for (int g = 0; g < G; ++g) {
      matmul_strided_batched(Op::T, Op::N, T, hs, T, 1.0f, p + g * TT, T, G * TT, dy + g * hs, Cq,
                             int64_t(G) * hs, g == 0 ? 0.0f : 1.0f, dq + v_col, W, hs, KVH);
    }
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
    const float* q = qkv.data() + int64_t(b) * T * W;
    const float* ds = datt.data() + int64_t(b) * NH * TT;
    float* dq = dqkv.data() + int64_t(b) * T * W;
    // dQ_h = dS_h · K_kv;  dK_kv = Σ_g dS_hᵀ · Q_h over the group, g ascending
    for (int g = 0; g < G; ++g) {
      matmul_strided_batched(Op::N, Op::N, T, hs, T, 1.0f, ds + g * TT, T, G * TT, q + k_col, W, hs,
                             0.0f, dq + g * hs, W, int64_t(G) * hs, KVH);
    }
    for (int g = 0; g < G; ++g) {
      matmul_strided_batched(Op::T, Op::N, T, hs, T, 1.0f, ds + g * TT, T, G * TT, q + g * hs, W,
                             int64_t(G) * hs, g == 0 ? 0.0f : 1.0f, dq + k_col, W, hs, KVH);
    }
  }
}

}  // namespace mpf::test
