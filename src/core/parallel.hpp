// How kernels are launched: Kokkos parallel_for over a flat range.
//
// Debian's Kokkos 3.4 is Serial-only, which would leave every core but one idle in the element-wise
// and memory-bound kernels (AdamW over 124M parameters takes 385 ms on one core here, 220 ms on
// two). When the default execution space is Serial and the build has OpenMP, the range is cut into
// one contiguous piece per OpenMP thread and each piece runs as its own Serial parallel_for
// (Serial's RangePolicy dispatch is a plain loop, safe to call from several threads). With an
// OpenMP or CUDA Kokkos the range goes straight to Kokkos.
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/profile.hpp"
#include "core/types.hpp"
#ifdef _OPENMP
#include <omp.h>
#endif

namespace mpf {

// Kokkos::Serial exists only when Kokkos was built with it (Kokkos 4 turns Serial off by default
// once OpenMP is on), so the split path is compiled only then.
#if defined(_OPENMP) && defined(KOKKOS_ENABLE_SERIAL)
inline constexpr bool kSplitOverOpenMP = std::is_same_v<ExecSpace, Kokkos::Serial>;
#else
inline constexpr bool kSplitOverOpenMP = false;
#endif

#ifdef _OPENMP
inline int host_thread_count() {
  return omp_get_max_threads();
}
inline int host_thread_id() {
  return omp_get_thread_num();
}
#else
inline int host_thread_count() {
  return 1;
}
inline int host_thread_id() {
  return 0;
}
#endif

namespace detail {
template <class F>
void launch(const char* label, int64_t n, int64_t min_split, const F& f) {
  const profile::Scope timer(label);
#ifdef KOKKOS_ENABLE_SERIAL
  if constexpr (kSplitOverOpenMP) {
    if (n >= min_split && host_thread_count() > 1) {
#pragma omp parallel
      {
        const int64_t nt = host_thread_count(), id = host_thread_id();
        const int64_t lo = n * id / nt, hi = n * (id + 1) / nt;
        Kokkos::parallel_for(label, Kokkos::RangePolicy<Kokkos::Serial, int64_t>(lo, hi), f);
      }
      return;
    }
  }
#endif
  Kokkos::parallel_for(label, Kokkos::RangePolicy<ExecSpace, int64_t>(0, n), f);
}
}  // namespace detail

// f(i) for i in [0, n), i an element: cheap, so short ranges are not worth a fork/join.
template <class F>
void for_each(const char* label, int64_t n, const F& f) {
  detail::launch(label, n, 1 << 12, f);
}

// f(r) for r in [0, rows), r a row of many elements (a LayerNorm row, a vocabulary row).
template <class F>
void for_rows(const char* label, int64_t rows, const F& f) {
  detail::launch(label, rows, 2, f);
}

// x[0, n) = value, over all threads (Kokkos::deep_copy of a scalar is one thread on Serial).
inline void fill(float* x, int64_t n, float value) {
  for_each(
      "mpf::fill", n, KOKKOS_LAMBDA(int64_t i) { x[i] = value; });
}

// Σ f(i) for i in [0, n), in double, with a summation order fixed by n alone (16 lanes within
// blocks of kSumBlock, then the block sums in order), so the result is bitwise the same for any
// thread count or backend, and the lanes vectorize.
inline constexpr int64_t kSumBlock = 1 << 14;

namespace detail {
// The block sums' scratch: grown when a sum needs more, kept for the next (a training step
// allocates nothing), released when Kokkos finalizes. One sum runs at a time.
inline Kokkos::View<double*, MemSpace> sum_scratch(int64_t nblocks) {
  static Kokkos::View<double*, MemSpace> scratch;
  static const bool hooked = (Kokkos::push_finalize_hook([] { scratch = {}; }), true);
  (void)hooked;
  if (int64_t(scratch.extent(0)) < nblocks) {
    scratch = Kokkos::View<double*, MemSpace>(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, "mpf::sum::partial"), nblocks);
  }
  return scratch;
}
}  // namespace detail

template <class F>
double sum(const char* label, int64_t n, const F& f) {
  const int64_t nblocks = (n + kSumBlock - 1) / kSumBlock;
  const Kokkos::View<double*, MemSpace> partial = detail::sum_scratch(nblocks);
  for_rows(
      label, nblocks, KOKKOS_LAMBDA(int64_t blk) {
        const int64_t lo = blk * kSumBlock, hi = lo + kSumBlock < n ? lo + kSumBlock : n;
        constexpr int kLanes = 16;
        double lane[kLanes] = {};
        int64_t i = lo;
        for (; i + kLanes <= hi; i += kLanes) {
          for (int k = 0; k < kLanes; ++k) lane[k] += f(i + k);
        }
        double acc = 0.0;
        for (int k = 0; k < kLanes; ++k) acc += lane[k];
        for (; i < hi; ++i) acc += f(i);
        partial(blk) = acc;
      });
  auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), partial);
  double total = 0.0;
  for (int64_t b = 0; b < nblocks; ++b) total += host(b);
  return total;
}

}  // namespace mpf
