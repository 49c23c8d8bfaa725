#include "model/layers/cross_entropy.hpp"

#include <Kokkos_Core.hpp>
#include <cfloat>
#include <climits>
#include <cmath>

#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/vector_math.hpp"
#include "parallel/device_mpi.hpp"

namespace mpf {

namespace {
// The three passes over a row of this rank's logits z (Vl columns, `real` of them vocabulary):
// its max; z = exp(z − max) and their sum, with the target's logit taken first; z /= sum and the
// row's loss. With one TP rank they run back to back in one kernel, the row still in cache; with
// several, the row statistics are combined over the ranks between them.
struct Rows {
  Tensor logits, losses;
  float *row_max, *row_sum, *target;
  Tokens targets;
  int vocab_begin, Vl, real;

  KOKKOS_INLINE_FUNCTION void max(const Row& r, int64_t n) const {
    const float* z = logits.data() + n * Vl;
    const float m = real > 0 ? r.max(real, [z](int j) { return z[j]; }) : -FLT_MAX;
    r.once([=] { row_max[n] = m; });
  }
  KOKKOS_INLINE_FUNCTION void exp_and_sum(const Row& r, int64_t n) const {
    float* z = logits.data() + n * Vl;
    const int64_t t = int64_t(targets(n)) - vocab_begin;
    r.once([=] { target[n] = t >= 0 && t < real ? z[t] : 0.0f; });
    const float m = row_max[n];
    r.for_each(real, [=](int j) { z[j] = vmath::exp(z[j] - m); });
    const float s = r.sum(real, [z](int j) { return z[j]; });
    r.once([=] { row_sum[n] = s; });
  }
  KOKKOS_INLINE_FUNCTION void normalize(const Row& r, int64_t n) const {
    float* z = logits.data() + n * Vl;
    const float s = row_sum[n];
    r.once([=] { losses(n) = row_max[n] + logf(s) - target[n]; });
    const float inv = 1.0f / s;
    r.for_each(real, [=](int j) { z[j] *= inv; });
    r.for_each(Vl - real, [=](int j) { z[real + j] = 0.0f; });
  }
};
}  // namespace

void cross_entropy_forward(Tensor losses, Tensor logits, Tensor row_stats, const Tokens& targets,
                           int64_t N, int V, int vocab_begin, int Vl, MPI_Comm tp) {
  require(N <= INT_MAX / 2, "a batch of more than 2^30 tokens per rank is not supported");
  // Columns of this shard that are real vocabulary (a shard may hold only padding).
  const int real = V - vocab_begin < 0 ? 0 : (V - vocab_begin < Vl ? V - vocab_begin : Vl);
  // row_stats (3,N): the max, Σ exp and the target logit, the last two next to each other for one
  // all-reduce.
  const Rows rows{logits,
                  losses,
                  row_stats.data(),
                  row_stats.data() + N,
                  row_stats.data() + 2 * N,
                  targets,
                  vocab_begin,
                  Vl,
                  real};
  int size = 1;
  MPI_Comm_size(tp, &size);
  if (size == 1) {
    for_rows(
        "mpf::cross_entropy_forward", N, Vl, KOKKOS_LAMBDA(const Row& r, int64_t n) {
          rows.max(r, n);
          rows.exp_and_sum(r, n);
          rows.normalize(r, n);
        });
    return;
  }
  for_rows(
      "mpf::cross_entropy_max", N, Vl, KOKKOS_LAMBDA(const Row& r, int64_t n) { rows.max(r, n); });
  allreduce(rows.row_max, N, MPI_MAX, tp);
  for_rows(
      "mpf::cross_entropy_exp", N, Vl,
      KOKKOS_LAMBDA(const Row& r, int64_t n) { rows.exp_and_sum(r, n); });
  allreduce_sum(rows.row_sum, 2 * N, tp);
  for_rows(
      "mpf::cross_entropy_normalize", N, Vl,
      KOKKOS_LAMBDA(const Row& r, int64_t n) { rows.normalize(r, n); });
}

void cross_entropy_backward_input(Tensor dlogits, Tensor probs, const Tokens& targets, float dloss,
                                  int64_t N, int vocab_begin, int Vl) {
  // Padded columns have probability 0, so their gradient is 0 too.
  for_each_2d(
      "mpf::cross_entropy_backward_input", N, Vl, KOKKOS_LAMBDA(int64_t n, int j) {
        const int64_t t = int64_t(targets(n)) - vocab_begin;
        dlogits(n * Vl + j) = probs(n * Vl + j) * dloss - (j == t ? dloss : 0.0f);
      });
}

}  // namespace mpf
