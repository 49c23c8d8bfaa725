#include "model/layers/cross_entropy.hpp"

#include <cmath>

#include "core/parallel.hpp"

namespace mpf {

void cross_entropy_forward(Tensor losses, Tensor lse, Tensor logits, const Tokens& targets,
                           int64_t N, int V, int Vp) {
  for_rows(
      "mpf::cross_entropy_forward", N, KOKKOS_LAMBDA(int64_t n) {
        const float* z = logits.data() + n * Vp;
        float mx = z[0];
        for (int j = 1; j < V; ++j) mx = z[j] > mx ? z[j] : mx;
        float sum = 0.0f;
        for (int j = 0; j < V; ++j) sum += expf(z[j] - mx);
        const float l = mx + logf(sum);
        lse(n) = l;
        losses(n) = l - z[targets(n)];
      });
}

void cross_entropy_backward_input(Tensor dlogits, Tensor logits, Tensor lse, const Tokens& targets,
                                  float dloss, int64_t N, int V, int Vp) {
  for_rows(
      "mpf::cross_entropy_backward_input", N, KOKKOS_LAMBDA(int64_t n) {
        const float* z = logits.data() + n * Vp;
        float* dz = dlogits.data() + n * Vp;
        const float l = lse(n);
        for (int j = 0; j < V; ++j) dz[j] = expf(z[j] - l) * dloss;
        for (int j = V; j < Vp; ++j) dz[j] = 0.0f;
        dz[targets(n)] -= dloss;
      });
}

}  // namespace mpf
