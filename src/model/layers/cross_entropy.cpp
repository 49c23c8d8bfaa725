#include "model/layers/cross_entropy.hpp"

#include <Kokkos_Core.hpp>
#include <cfloat>
#include <climits>
#include <cmath>

#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/vector_math.hpp"

namespace mpf {

void cross_entropy_forward(Tensor losses, Tensor logits, Tensor row_stats, const Tokens& targets,
                           int64_t N, int V, int vocab_begin, int Vl, MPI_Comm tp) {
  // Columns of this shard that are real vocabulary (a shard may hold only padding).
  const int real = V - vocab_begin < 0 ? 0 : (V - vocab_begin < Vl ? V - vocab_begin : Vl);
  float* row_max = row_stats.data();
  float* sum_and_target = row_stats.data() + N;  // (2,N): Σ exp, then the target logit
  int size = 1;
  MPI_Comm_size(tp, &size);
  require(N <= INT_MAX / 2, "a batch of more than 2^30 tokens per rank is not supported");

  for_rows(
      "mpf::cross_entropy_max", N, KOKKOS_LAMBDA(int64_t n) {
        row_max[n] = real > 0 ? vmath::row_max(logits.data() + n * Vl, real) : -FLT_MAX;
      });
  if (size > 1) {
    Kokkos::fence();
    MPF_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, row_max, int(N), MPI_FLOAT, MPI_MAX, tp));
  }
  for_rows(
      "mpf::cross_entropy_exp", N, KOKKOS_LAMBDA(int64_t n) {
        float* z = logits.data() + n * Vl;
        const int64_t t = int64_t(targets(n)) - vocab_begin;
        sum_and_target[N + n] = t >= 0 && t < real ? z[t] : 0.0f;
        for (int j = 0; j < real; ++j) z[j] = vmath::exp(z[j] - row_max[n]);
        sum_and_target[n] = vmath::row_sum(z, real);
      });
  if (size > 1) {
    Kokkos::fence();
    MPF_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sum_and_target, int(2 * N), MPI_FLOAT, MPI_SUM, tp));
  }
  for_rows(
      "mpf::cross_entropy_normalize", N, KOKKOS_LAMBDA(int64_t n) {
        float* z = logits.data() + n * Vl;
        const float sum = sum_and_target[n];
        losses(n) = row_max[n] + logf(sum) - sum_and_target[N + n];
        const float inv = 1.0f / sum;
        for (int j = 0; j < real; ++j) z[j] *= inv;
        for (int j = real; j < Vl; ++j) z[j] = 0.0f;
      });
}

void cross_entropy_backward_input(Tensor dlogits, Tensor probs, const Tokens& targets, float dloss,
                                  int64_t N, int vocab_begin, int Vl) {
  for_rows(
      "mpf::cross_entropy_backward_input", N, KOKKOS_LAMBDA(int64_t n) {
        const float* p = probs.data() + n * Vl;
        float* dz = dlogits.data() + n * Vl;
        for (int j = 0; j < Vl; ++j) dz[j] = p[j] * dloss;  // padded columns: probability 0
        const int64_t t = int64_t(targets(n)) - vocab_begin;
        if (t >= 0 && t < Vl) dz[t] -= dloss;
      });
}

}  // namespace mpf
