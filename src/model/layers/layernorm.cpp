#include "model/layers/layernorm.hpp"

#include <cmath>

#include "core/parallel.hpp"
#include "core/vector_math.hpp"

namespace mpf {

void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight, Tensor bias,
                       int64_t N, int C) {
  for_rows(
      "mpf::layernorm_forward", N, KOKKOS_LAMBDA(int64_t n) {
        const float* x = inp.data() + n * C;
        float* y = out.data() + n * C;
        const float m = vmath::row_sum(x, C) / C;
        const float v = vmath::lane_sum(C, [x, m](int c) { return (x[c] - m) * (x[c] - m); }) / C;
        const float s = 1.0f / sqrtf(v + 1e-5f);
        for (int c = 0; c < C; ++c) y[c] = (x[c] - m) * s * weight(c) + bias(c);
        mean(n) = m;
        rstd(n) = s;
      });
}

void layernorm_backward_input(Tensor dinp, Tensor dresidual, Tensor dout, Tensor inp, Tensor mean,
                              Tensor rstd, Tensor weight, int64_t N, int C) {
  const bool has_residual = dresidual.data() != nullptr;
  for_rows(
      "mpf::layernorm_backward_input", N, KOKKOS_LAMBDA(int64_t n) {
        const float* x = inp.data() + n * C;
        const float* dy = dout.data() + n * C;
        const float m = mean(n), s = rstd(n);
        // Two row means: of w·dy and of w·dy·xhat (the projections the normalisation removes).
        const float* w = weight.data();
        const float mean_wdy = vmath::lane_sum(C, [w, dy](int c) { return w[c] * dy[c]; }) / C;
        const float mean_wdy_xhat =
            vmath::lane_sum(C, [w, dy, x, m, s](int c) { return w[c] * dy[c] * (x[c] - m) * s; }) /
            C;
        for (int c = 0; c < C; ++c) {
          const float xhat = (x[c] - m) * s;
          const float g = s * (weight(c) * dy[c] - mean_wdy - xhat * mean_wdy_xhat);
          dinp(n * C + c) = (has_residual ? dresidual(n * C + c) : 0.0f) + g;
        }
      });
}

void layernorm_backward_weight(Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor mean,
                               Tensor rstd, int64_t N, int C) {
  // Blocks of channels, each summing down all rows: contiguous inner loop, no write conflicts.
  constexpr int kBlock = 32;
  const int nblocks = (C + kBlock - 1) / kBlock;
  for_rows(
      "mpf::layernorm_backward_weight", nblocks, KOKKOS_LAMBDA(int64_t blk) {
        const int c0 = blk * kBlock, c1 = c0 + kBlock < C ? c0 + kBlock : C;
        float dw[kBlock] = {}, db[kBlock] = {};
        for (int64_t n = 0; n < N; ++n) {
          const float m = mean(n), s = rstd(n);
          const float* x = inp.data() + n * C;
          const float* dy = dout.data() + n * C;
          for (int c = c0; c < c1; ++c) {
            dw[c - c0] += dy[c] * (x[c] - m) * s;
            db[c - c0] += dy[c];
          }
        }
        for (int c = c0; c < c1; ++c) {
          dweight(c) += dw[c - c0];
          dbias(c) += db[c - c0];
        }
      });
}

}  // namespace mpf
