#include "model/layers/projection_norm.hpp"

#include <cmath>

#include "core/parallel.hpp"
#include "parallel/device_mpi.hpp"

namespace mpf {

namespace {
// Row n's Q (part 0) or K (part 1) sum over TP, each replicated kv head counted once.
void sum_over_tp(Tensor sums, const ProjectionNormShape& s, MPI_Comm tp) {
  allreduce_sum(sums.data(), 2 * s.rows, tp);
  if (s.kv_replicas == 1) return;
  const float inv = 1.0f / float(s.kv_replicas);
  for_each(
      "mpf::projection_norm_replicas", s.rows,
      KOKKOS_LAMBDA(int64_t n) { sums(2 * n + 1) *= inv; });
}

// Row m of a launch is part m % 2 (Q, then K) of packed row m / 2: its values' first column and
// count here, the whole projection's width (the mean's divisor), and where its weights start.
struct Part {
  int64_t row;
  int first, width;
  bool query;
  float full;
  int64_t weight_first;
  KOKKOS_INLINE_FUNCTION const float* weight(const Tensor& q, const Tensor& k) const {
    return (query ? q.data() : k.data()) + weight_first;
  }
};
KOKKOS_INLINE_FUNCTION Part part_of(int64_t m, const ProjectionNormShape& s) {
  const bool query = m % 2 == 0;
  return {m / 2,
          query ? 0 : s.q,
          query ? s.q : s.k,
          query,
          float(query ? s.q_full : s.k_full),
          query ? s.q_first : s.k_first};
}
// A launch's row width: the wider part's.
int widest(const ProjectionNormShape& s) {
  return s.q > s.k ? s.q : s.k;
}
}  // namespace

void projection_rmsnorm_forward(Tensor qkv, Tensor raw, Tensor rstd, Tensor q_weight,
                                Tensor k_weight, const ProjectionNormShape& s, float eps,
                                MPI_Comm tp) {
  const int width = s.q + s.k;
  for_rows(
      "mpf::projection_rmsnorm_sums", 2 * s.rows, widest(s),
      KOKKOS_LAMBDA(const Row& r, int64_t m) {
        const Part p = part_of(m, s);
        const float* y = qkv.data() + p.row * s.ld + p.first;
        const float ss = r.sum(p.width, [y](int c) { return y[c] * y[c]; });
        r.once([=] { rstd(m) = ss; });
      });
  sum_over_tp(rstd, s, tp);
  for_rows(
      "mpf::projection_rmsnorm_forward", 2 * s.rows, widest(s),
      KOKKOS_LAMBDA(const Row& r, int64_t m) {
        const Part p = part_of(m, s);
        float* y = qkv.data() + p.row * s.ld + p.first;
        float* x = raw.data() + p.row * width + p.first;
        const float* w = p.weight(q_weight, k_weight);
        const float inv = 1.0f / sqrtf(rstd(m) / p.full + eps);
        r.for_each(p.width, [=](int c) {
          const float v = y[c];
          x[c] = v;
          y[c] = v * inv * w[c];
        });
        r.once([=] { rstd(m) = inv; });
      });
}

void projection_rmsnorm_backward_weight(Tensor dweights, Tensor dqkv, Tensor raw, Tensor rstd,
                                        const ProjectionNormShape& s) {
  const int width = s.q + s.k;
  const int64_t ld = s.ld;
  fill(dweights.data(), width, 0.0f);
  // Q's columns, then K's: each part with its own 1/rms (rstd's column 0 or 1).
  for (int part = 0; part < 2; ++part) {
    const int first = part == 0 ? 0 : s.q;
    add_column_sums<1>(
        "mpf::projection_rmsnorm_backward_weight", s.rows, part == 0 ? s.q : s.k,
        KOKKOS_LAMBDA(int64_t n, int c, float* v) {
          v[0] = dqkv(n * ld + first + c) * raw(n * width + first + c) * rstd(2 * n + part);
        },
        ColumnSums<1>{{dweights.data() + first}});
  }
}

void projection_rmsnorm_backward_input(Tensor dqkv, Tensor sums, Tensor raw, Tensor rstd,
                                       Tensor q_weight, Tensor k_weight,
                                       const ProjectionNormShape& s, MPI_Comm tp) {
  const int width = s.q + s.k;
  for_rows(
      "mpf::projection_rmsnorm_backward_sums", 2 * s.rows, widest(s),
      KOKKOS_LAMBDA(const Row& r, int64_t m) {
        const Part p = part_of(m, s);
        const float* dy = dqkv.data() + p.row * s.ld + p.first;
        const float* x = raw.data() + p.row * width + p.first;
        const float* w = p.weight(q_weight, k_weight);
        const float sum = r.sum(p.width, [=](int c) { return w[c] * dy[c] * x[c]; });
        r.once([=] { sums(m) = sum; });
      });
  sum_over_tp(sums, s, tp);
  for_rows(
      "mpf::projection_rmsnorm_backward_input", 2 * s.rows, widest(s),
      KOKKOS_LAMBDA(const Row& r, int64_t m) {
        const Part p = part_of(m, s);
        float* dy = dqkv.data() + p.row * s.ld + p.first;
        const float* x = raw.data() + p.row * width + p.first;
        const float* w = p.weight(q_weight, k_weight);
        const float inv = rstd(m);
        // dx = inv·w·dy − x·inv³·Σ(w·dy·x)/N, N the whole projection's width.
        const float coef = inv * inv * inv * sums(m) / p.full;
        r.for_each(p.width, [=](int c) { dy[c] = inv * w[c] * dy[c] - x[c] * coef; });
      });
}

}  // namespace mpf
