#include "train/step_log.hpp"

#include <algorithm>
#include <cstdio>
#include <vector>

#include <Kokkos_Core.hpp>

#include "backends/gemm.hpp"
#include "core/types.hpp"

namespace mpf {

double flops_per_token(const GPTConfig& cfg, int T) {
  const double n_prime =
      double(parameter_count(cfg)) - double(cfg.max_seq_len) * double(cfg.channels);
  return 6.0 * n_prime + 12.0 * cfg.layers * double(T) * cfg.channels;
}

double measure_peak_gflops() {
  // The shape of GPT-2 124M's fc layer at B·T = 512. The first runs fault in pages and wake the
  // thread pool; the best of the rest is the peak (about 0.1 s in all on 2 cores).
  const int M = 512, N = 3072, K = 768, warmup = 3, reps = 12;
  // In the execution space's memory: on a GPU the backend reads device pointers.
  Slab a("mpf::peak::a", size_t(M) * K), b("mpf::peak::b", size_t(N) * K),
      c("mpf::peak::c", size_t(M) * N);
  Kokkos::deep_copy(a, 0.5f);
  Kokkos::deep_copy(b, 0.25f);
  double best = 0.0;
  for (int rep = 0; rep < warmup + reps; ++rep) {
    Stopwatch sw;
    backend::gemm(backend::Op::N, backend::Op::T, M, N, K, 1.0f, a.data(), K, b.data(), K, 0.0f,
                  c.data(), N);
    Kokkos::fence();  // a GPU product is asynchronous
    const double s = sw.seconds();
    if (rep >= warmup) best = std::max(best, 2.0 * M * N * K / s / 1e9);
  }
  return best;
}

std::string format_step(const StepRecord& r, double tokens, double flops_per_step,
                        double peak_flops) {
  char buf[256];
  const double s = r.ms / 1e3;
  std::snprintf(buf, sizeof buf,
                "step %d/%d | loss %.6f | lr %.1e | norm %.4f | %.1f ms | %.0f tok/s | MFU %.1f%%",
                r.step, r.steps, r.loss, r.lr, r.norm, r.ms, tokens / s,
                100.0 * flops_per_step / s / peak_flops);
  return buf;
}

void PhaseTimers::start() {
  since_mark_.reset();
}

void PhaseTimers::mark(Phase phase) {
  Kokkos::fence();
  if (enabled_) seconds_[phase] += since_mark_.seconds();
  since_mark_.reset();
}

std::string PhaseTimers::summary() const {
  static const char* names[kCount] = {"data", "zero_grad", "fwd_bwd", "dp_comm", "optimizer"};
  double total = 0.0;
  for (double s : seconds_) total += s;
  std::string text = "phases";
  for (int i = 0; i < kCount; ++i) {
    char buf[64];
    std::snprintf(buf, sizeof buf, " | %s %.1f%%", names[i],
                  total > 0 ? 100.0 * seconds_[i] / total : 0.0);
    text += buf;
  }
  return text;
}

}  // namespace mpf
