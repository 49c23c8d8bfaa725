#include "layout/peak.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>

#include "backends/gemm.hpp"
#include "core/stopwatch.hpp"
#include "core/types.hpp"

namespace mpf {

namespace {
// The best GFLOP/s of timed runs of product(), after two untimed ones (the first runs fault in
// pages, wake the thread pool, create a library's cached kernels): at least 3 and at most 12,
// stopping once 0.15 s have been timed, so a slow library does not hold up the start.
template <class Product>
double best_rate(double flops, Product product) {
  const int warmup = 2, min_reps = 3, max_reps = 12;
  const double budget_s = 0.15;
  double best = 0.0, timed = 0.0;
  for (int rep = 0; rep < warmup + max_reps; ++rep) {
    Stopwatch sw;
    product();
    Kokkos::fence();  // a GPU product is asynchronous
    const double s = sw.seconds();
    if (rep < warmup) continue;
    best = std::max(best, flops / s / 1e9);
    timed += s;
    if (rep + 1 - warmup >= min_reps && timed >= budget_s) break;
  }
  return best;
}
}  // namespace

namespace {
// measure_peak's products with every library: timed (the best rate kept), or once each.
PeakRate products_with_every_library(Precision precision, bool timed) {
  using backend::Op;
  const int M = 512, N = 3072, K = 768;
  const double flops = 2.0 * M * N * K;
  // In the execution space's memory: on a GPU the backend reads device pointers.
  Slab c("mpf::peak::c", size_t(M) * N);
  Slab a, b;
  Bf16Slab a16, b16;
  if (precision == Precision::fp32) {
    a = Slab("mpf::peak::a", size_t(M) * K);
    b = Slab("mpf::peak::b", size_t(N) * K);
    Kokkos::deep_copy(a, 0.5f);
    Kokkos::deep_copy(b, 0.25f);
  } else {
    a16 = Bf16Slab("mpf::peak::a16", size_t(M) * K);
    b16 = Bf16Slab("mpf::peak::b16", size_t(N) * K);
    Kokkos::deep_copy(a16, to_bf16(0.5f));
    Kokkos::deep_copy(b16, to_bf16(0.25f));
  }
  const std::string in_use = backend::selected();
  PeakRate peak;
  for (const std::string& library : backend::available()) {
    backend::select(library);
    if (precision == Precision::bf16 && !backend::kernels().bf16_missing.empty()) continue;
    const auto product = [&] {
      if (precision == Precision::fp32) {
        backend::gemm(Op::N, Op::T, M, N, K, 1.0f, a.data(), K, b.data(), K, 0.0f, c.data(), N);
      } else {
        backend::gemm_bf16(Op::N, Op::T, M, N, K, 1.0f, a16.data(), K, b16.data(), K, 0.0f,
                           c.data(), N);
      }
    };
    if (!timed) {
      product();
      Kokkos::fence();
      continue;
    }
    const double rate = best_rate(flops, product);
    if (rate > peak.gflops) peak = {rate, library};
  }
  backend::select(in_use);
  return peak;
}
}  // namespace

PeakRate measure_peak(Precision precision) {
  return products_with_every_library(precision, true);
}

void warm_gemm_libraries(Precision precision) {
  products_with_every_library(precision, false);
}

}  // namespace mpf
