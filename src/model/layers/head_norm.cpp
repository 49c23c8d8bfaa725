#include "model/layers/head_norm.hpp"

#include <cmath>

#include "core/parallel.hpp"

namespace mpf {

namespace {
// Where head m of the launch (m = row · H + head) lies in the packed rows, and its weight.
struct HeadAt {
  int64_t offset;  // of its first value in qkv / dqkv
  bool query;      // a Q head (q_weight), else a K head (k_weight)
};
KOKKOS_INLINE_FUNCTION HeadAt head_at(int64_t m, const HeadNormShape& s) {
  const int H = s.heads();
  const int h = int(m % H);
  return {(m / H) * s.ld + int64_t(h) * s.hs, h < s.NQ};
}
}  // namespace

void head_rmsnorm_forward(Tensor qkv, Tensor raw, Tensor rstd, Tensor q_weight, Tensor k_weight,
                          const HeadNormShape& s, float eps) {
  const int hs = s.hs;
  // A row of the launch is one head of one packed row.
  for_rows(
      "mpf::head_rmsnorm_forward", s.rows * s.heads(), hs, KOKKOS_LAMBDA(const Row& r, int64_t m) {
        const HeadAt at = head_at(m, s);
        float* y = qkv.data() + at.offset;
        float* x = raw.data() + m * hs;
        const float* w = at.query ? q_weight.data() : k_weight.data();
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
  const int hs = s.hs;
  fill(dweights.data(), 2 * int64_t(hs), 0.0f);
  add_column_sums<2>(
      "mpf::head_rmsnorm_backward_weight", s.rows * s.heads(), hs,
      KOKKOS_LAMBDA(int64_t m, int c, float* v) {
        const HeadAt at = head_at(m, s);
        const float g = dqkv(at.offset + c) * raw(m * hs + c) * rstd(m);
        v[0] = at.query ? g : 0.0f;
        v[1] = at.query ? 0.0f : g;
      },
      ColumnSums<2>{{dweights.data(), dweights.data() + hs}});
}

void head_rmsnorm_backward_input(Tensor dqkv, Tensor raw, Tensor rstd, Tensor q_weight,
                                 Tensor k_weight, const HeadNormShape& s) {
  const int hs = s.hs;
  for_rows(
      "mpf::head_rmsnorm_backward_input", s.rows * s.heads(), hs,
      KOKKOS_LAMBDA(const Row& r, int64_t m) {
        const HeadAt at = head_at(m, s);
        float* dy = dqkv.data() + at.offset;
        const float* x = raw.data() + m * hs;
        const float* w = at.query ? q_weight.data() : k_weight.data();
        const float inv = rstd(m);
        // As rmsnorm_backward_input: with x̂ = x·inv, dx = inv·(w·dy − x̂·mean(w·dy·x̂)).
        const float mean = r.sum(hs, [=](int c) { return w[c] * dy[c] * x[c] * inv; }) / hs;
        r.for_each(hs, [=](int c) { dy[c] = inv * (w[c] * dy[c] - x[c] * inv * mean); });
      });
}

}  // namespace mpf
