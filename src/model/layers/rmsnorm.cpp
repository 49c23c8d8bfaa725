#include "model/layers/rmsnorm.hpp"

#include <cmath>

#include "core/parallel.hpp"

namespace mpf {

void rmsnorm_forward(Tensor out, Tensor rstd, Tensor inp, Tensor weight, int64_t N, int C,
                     float eps) {
  for_rows(
      "mpf::rmsnorm_forward", N, C, KOKKOS_LAMBDA(const Row& r, int64_t n) {
        const float* x = inp.data() + n * C;
        float* y = out.data() + n * C;
        const float ms = r.sum(C, [x](int c) { return x[c] * x[c]; }) / C;
        const float s = 1.0f / sqrtf(ms + eps);
        r.for_each(C, [=](int c) { y[c] = x[c] * s * weight(c); });
        r.once([=] { rstd(n) = s; });
      });
}

void rmsnorm_backward_input(Tensor dinp, Tensor dresidual, Tensor dout, Tensor inp, Tensor rstd,
                            Tensor weight, int64_t N, int C) {
  const bool has_residual = dresidual.data() != nullptr;
  for_rows(
      "mpf::rmsnorm_backward_input", N, C, KOKKOS_LAMBDA(const Row& r, int64_t n) {
        const float* x = inp.data() + n * C;
        const float* dy = dout.data() + n * C;
        const float* w = weight.data();
        const float s = rstd(n);
        // With xhat = x·s: ∂L/∂x = s·(w·dy − xhat · mean(w·dy·xhat)); the mean is the one
        // projection the normalisation removes (LayerNorm also removes mean(w·dy)).
        const float mean_wdy_xhat =
            r.sum(C, [w, dy, x, s](int c) { return w[c] * dy[c] * x[c] * s; }) / C;
        r.for_each(C, [=](int c) {
          const float g = s * (weight(c) * dy[c] - x[c] * s * mean_wdy_xhat);
          dinp(n * C + c) = (has_residual ? dresidual(n * C + c) : 0.0f) + g;
        });
      });
}

void rmsnorm_backward_weight(Tensor dweight, Tensor dout, Tensor inp, Tensor rstd, int64_t N,
                             int C) {
  add_column_sums<1>(
      "mpf::rmsnorm_backward_weight", N, C,
      KOKKOS_LAMBDA(int64_t n, int c, float* v) {
        v[0] = dout(n * C + c) * inp(n * C + c) * rstd(n);
      },
      ColumnSums<1>{{dweight.data()}});
}

}  // namespace mpf
