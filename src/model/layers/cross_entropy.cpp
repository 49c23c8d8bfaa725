#include "model/layers/cross_entropy.hpp"

#include <cmath>

#include "core/parallel.hpp"
#include "core/vector_math.hpp"

namespace mpf {

void cross_entropy_forward(Tensor losses, Tensor logits, const Tokens& targets, int64_t N, int V,
                           int Vp) {
  for_rows(
      "mpf::cross_entropy_forward", N, KOKKOS_LAMBDA(int64_t n) {
        float* z = logits.data() + n * Vp;
        const float mx = vmath::row_max(z, V);
        const float target_logit = z[targets(n)];
        for (int j = 0; j < V; ++j) z[j] = vmath::exp(z[j] - mx);
        const float sum = vmath::row_sum(z, V);
        losses(n) = mx + logf(sum) - target_logit;
        const float inv = 1.0f / sum;
        for (int j = 0; j < V; ++j) z[j] *= inv;
        for (int j = V; j < Vp; ++j) z[j] = 0.0f;
      });
}

void cross_entropy_backward_input(Tensor dlogits, Tensor probs, const Tokens& targets, float dloss,
                                  int64_t N, int Vp) {
  for_rows(
      "mpf::cross_entropy_backward_input", N, KOKKOS_LAMBDA(int64_t n) {
        const float* p = probs.data() + n * Vp;
        float* dz = dlogits.data() + n * Vp;
        for (int j = 0; j < Vp; ++j) dz[j] = p[j] * dloss;  // padded columns: probability 0
        dz[targets(n)] -= dloss;
      });
}

}  // namespace mpf
