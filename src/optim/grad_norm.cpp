#include "optim/grad_norm.hpp"

#include "core/parallel.hpp"
#include "core/transfer.hpp"

namespace mpf {

SumOfSquares::SumOfSquares() : total_("mpf::grad_norm::total", 1) {}

void SumOfSquares::reset() {
  Kokkos::deep_copy(ExecSpace(), total_, 0.0);
}

void SumOfSquares::add(const float* g, int64_t n) {
  sum_into(
      "mpf::sum_of_squares", n, KOKKOS_LAMBDA(int64_t i) { return double(g[i]) * double(g[i]); },
      total_.data());
}

double SumOfSquares::read() const {
  return read_to_host(total_.data(), "d2h gradient norm");
}

double sum_of_squares(const float* g, int64_t n) {
  SumOfSquares s;
  s.add(g, n);
  return s.read();
}

float clip_scale(double norm, float clip) {
  if (clip <= 0.0f) return 1.0f;
  const double scale = clip / (norm + 1e-6);
  return scale < 1.0 ? static_cast<float>(scale) : 1.0f;
}

}  // namespace mpf
