#include "model/layers/cross_entropy.hpp"

#include <Kokkos_Core.hpp>
#include <cfloat>
#include <climits>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/vector_math.hpp"
#include "parallel/device_mpi.hpp"

namespace mpf {

namespace {
// The passes over a row of this rank's logits z (Vl columns, `real` of them vocabulary): its max;
// the sum of exp(z − max), with the target's logit taken first; the row's loss; and, given a
// dloss, its gradient (exp(z − max) / sum − onehot) · dloss written over z. With one TP rank they
// run back to back in one kernel, the row still in cache (llm.c's fused classifier); with several,
// the row statistics are combined over the ranks between them.
// fp32 logits keep exp(z − max) in place between the sum and the gradient; bf16 logits (the LM
// head's under --precision bf16, as autocast's) are read as fp32 and, in a team, the exponentials
// computed again for the gradient, which alone is written back rounded: a bf16 exp would round p
// before p − 1 is taken (the host shape keeps them in a thread's fp32 row instead, below).
// A logit as fp32, and a gradient written in the logits' type (rounded to bf16 there).
KOKKOS_INLINE_FUNCTION float value(float x) {
  return x;
}
KOKKOS_INLINE_FUNCTION float value(bf16 x) {
  return from_bf16(x);
}
KOKKOS_INLINE_FUNCTION void store(float* p, float x) {
  *p = x;
}
KOKKOS_INLINE_FUNCTION void store(bf16* p, float x) {
  *p = to_bf16(x);
}

template <class Logits>
struct Rows {
  using Elem = typename Logits::value_type;
  static constexpr bool kFp32 = std::is_same<Elem, float>::value;
  Logits logits;
  Tensor losses;
  float *row_max, *row_sum, *target;
  Tokens targets;
  int vocab_begin, Vl, real;
  float dloss;

  KOKKOS_INLINE_FUNCTION void max(const Row& r, int64_t n) const {
    const Elem* z = logits.data() + n * Vl;
    const float m = real > 0 ? r.max(real, [z](int j) { return value(z[j]); }) : -FLT_MAX;
    r.once([=] { row_max[n] = m; });
  }
  // keep: write exp(z − max) over fp32 logits, for the gradient that follows.
  KOKKOS_INLINE_FUNCTION void exp_and_sum(const Row& r, int64_t n, bool keep) const {
    Elem* z = logits.data() + n * Vl;
    const int64_t t = int64_t(targets(n)) - vocab_begin;
    r.once([=] { target[n] = t >= 0 && t < real ? value(z[t]) : 0.0f; });
    const float m = row_max[n];
    float s;
    if (kFp32 && keep) {
      r.for_each(real, [=](int j) { store(z + j, vmath::exp(value(z[j]) - m)); });
      s = r.sum(real, [z](int j) { return value(z[j]); });
    } else {
      s = r.sum(real, [=](int j) { return vmath::exp(value(z[j]) - m); });
    }
    r.once([=] { row_sum[n] = s; });
  }
  KOKKOS_INLINE_FUNCTION void loss(const Row& r, int64_t n) const {
    r.once([=] { losses(n) = row_max[n] + logf(row_sum[n]) - target[n]; });
  }
  // kept: z holds exp(z − max) (exp_and_sum's keep), else the logits themselves.
  KOKKOS_INLINE_FUNCTION void gradient(const Row& r, int64_t n, bool kept) const {
    Elem* z = logits.data() + n * Vl;
    const int64_t t = int64_t(targets(n)) - vocab_begin;
    const float m = row_max[n], inv = 1.0f / row_sum[n], d = dloss;
    if (kFp32 && kept) {
      r.for_each(real, [=](int j) { store(z + j, value(z[j]) * inv * d - (j == t ? d : 0.0f)); });
    } else {
      r.for_each(real, [=](int j) {
        const float p = vmath::exp(value(z[j]) - m) * inv;
        store(z + j, p * d - (j == t ? d : 0.0f));
      });
    }
    // Padded columns have probability 0, so their gradient is 0 too.
    r.for_each(Vl - real, [=](int j) { store(z + real + j, 0.0f); });
  }
};

template <class Logits>
Rows<Logits> rows_of(Tensor losses, Logits logits, Tensor row_stats, const Tokens& targets,
                     int64_t N, int V, int vocab_begin, int Vl, float dloss) {
  require(N <= INT_MAX / 2, "a batch of more than 2^30 tokens per rank is not supported");
  // Columns of this shard that are real vocabulary (a shard may hold only padding).
  const int real = V - vocab_begin < 0 ? 0 : (V - vocab_begin < Vl ? V - vocab_begin : Vl);
  // row_stats (3,N): the max, Σ exp and the target logit, the last two next to each other for one
  // all-reduce.
  return Rows<Logits>{logits,
                      losses,
                      row_stats.data(),
                      row_stats.data() + N,
                      row_stats.data() + 2 * N,
                      targets,
                      vocab_begin,
                      Vl,
                      real,
                      dloss};
}

// One TP rank, bf16 logits, the host shape: each row is widened once into its thread's fp32 row
// (Vl floats a thread, in the cache), which takes the fp32 passes above with exp(z − max) kept in
// place, so each exponential is computed once (the team kernel computes them twice: a team's
// scratch cannot hold a row of a vocabulary). Only the gradient is rounded back over the logits.
// The same values in the same lanes as the passes above, so the same bits.
void forward_bf16_rows_on_host(const Rows<Tensor16>& rows, int64_t N, bool grad) {
  const int Vl = rows.Vl, real = rows.real;
  std::vector<float> scratch(size_t(host_thread_count()) * size_t(Vl));
  for_each_unit_on_host("mpf::cross_entropy_forward", N, [&](int64_t n, int thread) {
    float* x = scratch.data() + size_t(thread) * size_t(Vl);
    bf16* z = rows.logits.data() + n * Vl;
    for (int j = 0; j < real; ++j) x[j] = from_bf16(z[j]);
    const int64_t t = int64_t(rows.targets(n)) - rows.vocab_begin;
    const float target = t >= 0 && t < real ? x[t] : 0.0f;
    const float m = real > 0 ? vmath::row_max(x, real) : -FLT_MAX;
    for (int j = 0; j < real; ++j) x[j] = vmath::exp(x[j] - m);
    const float s = vmath::row_sum(x, real);
    rows.row_max[n] = m;
    rows.row_sum[n] = s;
    rows.target[n] = target;
    rows.losses(n) = m + logf(s) - target;
    if (!grad) return;
    const float inv = 1.0f / s, d = rows.dloss;
    for (int j = 0; j < real; ++j) z[j] = to_bf16(x[j] * inv * d - (j == t ? d : 0.0f));
    for (int j = real; j < Vl; ++j) z[j] = to_bf16(0.0f);
  });
}

template <class Logits>
void forward(Tensor losses, Logits logits, Tensor row_stats, const Tokens& targets, int64_t N,
             int V, int vocab_begin, int Vl, MPI_Comm tp, float dloss) {
  const Rows<Logits> rows =
      rows_of(losses, logits, row_stats, targets, N, V, vocab_begin, Vl, dloss);
  const bool grad = dloss != 0.0f;
  int size = 1;
  MPI_Comm_size(tp, &size);
  if constexpr (!kDeviceMemory && !Rows<Logits>::kFp32) {
    if (size == 1 && !device_shaped()) return forward_bf16_rows_on_host(rows, N, grad);
  }
  if (size == 1) {
    for_rows(
        "mpf::cross_entropy_forward", N, Vl, KOKKOS_LAMBDA(const Row& r, int64_t n) {
          rows.max(r, n);
          rows.exp_and_sum(r, n, grad);
          rows.loss(r, n);
          if (grad) rows.gradient(r, n, true);
        });
    return;
  }
  // Vocabulary-parallel: each row's max and sum cover every rank's columns, so the gradient waits
  // for their all-reduces and the pass stays three kernels around the two exchanges.
  for_rows(
      "mpf::cross_entropy_max", N, Vl, KOKKOS_LAMBDA(const Row& r, int64_t n) { rows.max(r, n); });
  allreduce(rows.row_max, N, MPI_MAX, tp);
  for_rows(
      "mpf::cross_entropy_exp", N, Vl,
      KOKKOS_LAMBDA(const Row& r, int64_t n) { rows.exp_and_sum(r, n, grad); });
  allreduce_sum(rows.row_sum, 2 * N, tp);
  for_rows(
      "mpf::cross_entropy_loss", N, grad ? Vl : 1, KOKKOS_LAMBDA(const Row& r, int64_t n) {
        rows.loss(r, n);
        if (grad) rows.gradient(r, n, true);
      });
}

template <class Logits>
void gradient(Logits logits, Tensor row_stats, const Tokens& targets, float dloss, int64_t N, int V,
              int vocab_begin, int Vl) {
  const Rows<Logits> rows =
      rows_of(Tensor(), logits, row_stats, targets, N, V, vocab_begin, Vl, dloss);
  for_rows(
      "mpf::cross_entropy_gradient", N, Vl,
      KOKKOS_LAMBDA(const Row& r, int64_t n) { rows.gradient(r, n, false); });
}
}  // namespace

void cross_entropy_forward(Tensor losses, Tensor logits, Tensor row_stats, const Tokens& targets,
                           int64_t N, int V, int vocab_begin, int Vl, MPI_Comm tp, float dloss) {
  forward(losses, logits, row_stats, targets, N, V, vocab_begin, Vl, tp, dloss);
}

void cross_entropy_forward(Tensor losses, Tensor16 logits, Tensor row_stats, const Tokens& targets,
                           int64_t N, int V, int vocab_begin, int Vl, MPI_Comm tp, float dloss) {
  forward(losses, logits, row_stats, targets, N, V, vocab_begin, Vl, tp, dloss);
}

void cross_entropy_gradient(Tensor logits, Tensor row_stats, const Tokens& targets, float dloss,
                            int64_t N, int V, int vocab_begin, int Vl) {
  gradient(logits, row_stats, targets, dloss, N, V, vocab_begin, Vl);
}

void cross_entropy_gradient(Tensor16 logits, Tensor row_stats, const Tokens& targets, float dloss,
                            int64_t N, int V, int vocab_begin, int Vl) {
  gradient(logits, row_stats, targets, dloss, N, V, vocab_begin, Vl);
}

}  // namespace mpf
