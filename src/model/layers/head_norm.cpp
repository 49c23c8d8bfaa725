#include "model/layers/head_norm.hpp"

#include <cmath>

#include "core/parallel.hpp"

namespace mpf {

void head_rmsnorm_forward(Tensor qkv, Tensor raw, Tensor rstd, Tensor q_weight, Tensor k_weight,
                          const HeadNormShape& s, float eps) {
  const int H = s.heads(), NQ = s.NQ, hs = s.hs;
  const int64_t ld = s.ld;
  // A row of the launch is one head of one packed row.
  for_rows(
      "mpf::head_rmsnorm_forward", s.rows * H, hs, KOKKOS_LAMBDA(const Row& r, int64_t m) {
        const int64_t n = m / H;
        const int h = int(m % H);
        float* y = qkv.data() + n * ld + int64_t(h) * hs;
        float* x = raw.data() + m * hs;
        const float* w = h < NQ ? q_weight.data() : k_weight.data();
        const float ms = r.sum(hs, [y](int c) { return y[c] * y[c]; }) / hs;
        const float inv = 1.0f / sqrtf(ms + eps);
        // Each column read before it is written: the raw value kept, the normalised one in place.
        r.for_each(hs, [=](int c) {
          const float v = y[c];
          x[c] = v;
          y[c] = v * inv * w[c];
        });
        r.once([=] { rstd(m) = inv; });
      });
}

void head_rmsnorm_backward_weight(Tensor dweights, Tensor dqkv, Tensor raw, Tensor rstd,
                                  const HeadNormShape& s) {
  const int H = s.heads(), NQ = s.NQ, hs = s.hs;
  const int64_t ld = s.ld;
  fill(dweights.data(), 2 * int64_t(hs), 0.0f);
  add_column_sums<2>(
      "mpf::head_rmsnorm_backward_weight", s.rows * H, hs,
      KOKKOS_LAMBDA(int64_t m, int c, float* v) {
        const int64_t n = m / H;
        const int h = int(m % H);
        const float g = dqkv(n * ld + int64_t(h) * hs + c) * raw(m * hs + c) * rstd(m);
        v[0] = h < NQ ? g : 0.0f;
        v[1] = h < NQ ? 0.0f : g;
      },
      ColumnSums<2>{{dweights.data(), dweights.data() + hs}});
}

void head_rmsnorm_backward_input(Tensor dqkv, Tensor raw, Tensor rstd, Tensor q_weight,
                                 Tensor k_weight, const HeadNormShape& s) {
  const int H = s.heads(), NQ = s.NQ, hs = s.hs;
  const int64_t ld = s.ld;
  for_rows(
      "mpf::head_rmsnorm_backward_input", s.rows * H, hs, KOKKOS_LAMBDA(const Row& r, int64_t m) {
        const int64_t n = m / H;
        const int h = int(m % H);
        float* dy = dqkv.data() + n * ld + int64_t(h) * hs;
        const float* x = raw.data() + m * hs;
        const float* w = h < NQ ? q_weight.data() : k_weight.data();
        const float inv = rstd(m);
        // As rmsnorm_backward_input: with x̂ = x·inv, dx = inv·(w·dy − x̂·mean(w·dy·x̂)).
        const float mean = r.sum(hs, [=](int c) { return w[c] * dy[c] * x[c] * inv; }) / hs;
        r.for_each(hs, [=](int c) { dy[c] = inv * (w[c] * dy[c] - x[c] * inv * mean); });
      });
}

}  // namespace mpf
