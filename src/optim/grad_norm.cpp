#include "optim/grad_norm.hpp"

#include "core/parallel.hpp"

namespace mpf {

double sum_of_squares(const float* g, int64_t n) {
  return sum(
      "mpf::sum_of_squares", n, KOKKOS_LAMBDA(int64_t i) { return double(g[i]) * double(g[i]); });
}

float clip_scale(double norm, float clip) {
  if (clip <= 0.0f) return 1.0f;
  const double scale = clip / (norm + 1e-6);
  return scale < 1.0 ? static_cast<float>(scale) : 1.0f;
}

}  // namespace mpf
