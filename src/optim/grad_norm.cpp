#include "optim/grad_norm.hpp"

#include "core/parallel.hpp"
#include "core/transfer.hpp"

namespace mpf {

SumOfSquares::SumOfSquares(int sums) : total_("mpf::grad_norm::total", sums) {}

void SumOfSquares::reset() {
  Kokkos::deep_copy(ExecSpace(), total_, 0.0);
}

void SumOfSquares::add(const float* g, int64_t n, int sum) {
  sum_into(
      "mpf::sum_of_squares", n, KOKKOS_LAMBDA(int64_t i) { return double(g[i]) * double(g[i]); },
      total_.data() + sum);
}

double SumOfSquares::read() const {
  return read_all()[0];
}

std::vector<double> SumOfSquares::read_all() const {
  std::vector<double> out(total_.extent(0));
  copy_to_host(out.data(), total_.data(), out.size() * sizeof(double), "d2h gradient norm");
  return out;
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
