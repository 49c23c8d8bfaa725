#include "model/layers/layernorm.hpp"

#include <cmath>

#include "core/parallel.hpp"

namespace mpf {

void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight, Tensor bias,
                       int64_t N, int C) {
  for_rows(
      "mpf::layernorm_forward", N, C, KOKKOS_LAMBDA(const Row& r, int64_t n) {
        const float* x = inp.data() + n * C;
        float* y = out.data() + n * C;
        const float m = r.sum(C, [x](int c) { return x[c]; }) / C;
        const float v = r.sum(C, [x, m](int c) { return (x[c] - m) * (x[c] - m); }) / C;
        const float s = 1.0f / sqrtf(v + 1e-5f);
        r.for_each(C, [=](int c) { y[c] = (x[c] - m) * s * weight(c) + bias(c); });
        r.once([=] {
          mean(n) = m;
          rstd(n) = s;
        });
      });
}

void layernorm_backward_input(Tensor dinp, Tensor dresidual, Tensor dout, Tensor inp, Tensor mean,
                              Tensor rstd, Tensor weight, int64_t N, int C) {
  const bool has_residual = dresidual.data() != nullptr;
  for_rows(
      "mpf::layernorm_backward_input", N, C, KOKKOS_LAMBDA(const Row& r, int64_t n) {
        const float* x = inp.data() + n * C;
        const float* dy = dout.data() + n * C;
        const float* w = weight.data();
        const float m = mean(n), s = rstd(n);
        // Two row means: of w·dy and of w·dy·xhat (the projections the normalisation removes).
        const float mean_wdy = r.sum(C, [w, dy](int c) { return w[c] * dy[c]; }) / C;
        const float mean_wdy_xhat =
            r.sum(C, [w, dy, x, m, s](int c) { return w[c] * dy[c] * (x[c] - m) * s; }) / C;
        r.for_each(C, [=](int c) {
          const float xhat = (x[c] - m) * s;
          const float g = s * (weight(c) * dy[c] - mean_wdy - xhat * mean_wdy_xhat);
          dinp(n * C + c) = (has_residual ? dresidual(n * C + c) : 0.0f) + g;
        });
      });
}

void layernorm_backward_weight(Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor mean,
                               Tensor rstd, int64_t N, int C) {
  add_column_sums<2>(
      "mpf::layernorm_backward_weight", N, C,
      KOKKOS_LAMBDA(int64_t n, int c, float* v) {
        const float dy = dout(n * C + c);
        v[0] = dy * (inp(n * C + c) - mean(n)) * rstd(n);
        v[1] = dy;
      },
      ColumnSums<2>{{dweight.data(), dbias.data()}});
}

}  // namespace mpf
