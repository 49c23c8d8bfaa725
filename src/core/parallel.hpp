// How kernels are launched: the shape of their parallelism, chosen for where they run.
//
// Host shape (CPU builds). A kernel's range (elements, or rows of many elements) is cut into one
// contiguous piece per thread; a row's loops run in one thread, its reductions in fixed lanes
// (core/vector_math.hpp), so they vectorize and give the same bits for any thread count. Debian's
// Kokkos 3.4 is Serial-only, which would leave every core but one idle in the element-wise and
// memory-bound kernels (AdamW over 124M parameters takes 385 ms on one core, 220 ms on two): when
// the default execution space is Serial and the build has OpenMP, the range is cut into one piece
// per OpenMP thread and each piece runs as its own Serial parallel_for (Serial's RangePolicy
// dispatch is a plain loop, safe to call from several threads). An OpenMP Kokkos takes the range
// itself.
//
// Device shape (GPU builds), Kokkos' hierarchical parallelism: an element-wise kernel gets a
// thread per element; a row kernel (LayerNorm, softmax, cross-entropy) a team of threads per row,
// which share the row's element loops (consecutive threads on consecutive elements: coalesced)
// and combine its reductions in the team; a column reduction (bias and LayerNorm weight
// gradients) a thread per (block of rows, column), whose partial sums a second pass adds up in
// order; a sum over many elements a team per block of them.
//
// Both shapes are compiled into every build: kernel_shape() is the device shape in a GPU build
// and the host shape otherwise, and a test may set the device shape on the CPU, where its team
// loops and reductions then run in host teams and are checked against the host shape's results.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/profile.hpp"
#include "core/transfer.hpp"
#include "core/types.hpp"
#include "core/vector_math.hpp"
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

enum class KernelShape { kHost, kDevice };
// The device shape in a GPU build, the host shape otherwise, unless a test set another.
KernelShape kernel_shape();
void set_kernel_shape(KernelShape shape);
inline bool device_shaped() {
  return kernel_shape() == KernelShape::kDevice;
}

using TeamPolicy = Kokkos::TeamPolicy<ExecSpace>;
using TeamMember = TeamPolicy::member_type;

// What a row kernel's body gets: its row's element loops and reductions, run by the one thread
// that has the row (host shape) or by the row's team (device shape). In the device shape every
// thread of the team makes every call, and a call returns once all of them have finished it, so
// what one call writes the next may read.
class Row {
 public:
  KOKKOS_INLINE_FUNCTION explicit Row(const TeamMember* team) : team_(team) {}

  // g(i) for every i in [0, n).
  template <class G>
  KOKKOS_INLINE_FUNCTION void for_each(int n, const G& g) const {
    if (team_) {
      Kokkos::parallel_for(Kokkos::TeamVectorRange(*team_, n), g);
      team_->team_barrier();
    } else {
      for (int i = 0; i < n; ++i) g(i);
    }
  }
  // Σ g(i) for i in [0, n): vmath::lane_sum in one thread, a team reduction in a team.
  template <class G>
  KOKKOS_INLINE_FUNCTION float sum(int n, const G& g) const {
    if (!team_) return vmath::lane_sum(n, g);
    float s = 0.0f;
    Kokkos::parallel_reduce(
        Kokkos::TeamVectorRange(*team_, n), [&](int i, float& acc) { acc += g(i); }, s);
    return s;
  }
  // max g(i) for i in [0, n), n >= 1.
  template <class G>
  KOKKOS_INLINE_FUNCTION float max(int n, const G& g) const {
    if (!team_) return vmath::lane_max(n, g);
    float m = g(0);
    Kokkos::parallel_reduce(
        Kokkos::TeamVectorRange(*team_, n),
        [&](int i, float& acc) {
          const float v = g(i);
          acc = v > acc ? v : acc;
        },
        Kokkos::Max<float>(m));
    return m;
  }
  // f() once for the row (its per-row results: a mean, a loss).
  template <class F>
  KOKKOS_INLINE_FUNCTION void once(const F& f) const {
    if (team_) {
      Kokkos::single(Kokkos::PerTeam(*team_), f);
      team_->team_barrier();
    } else {
      f();
    }
  }

 private:
  const TeamMember* team_;
};

namespace detail {
// f(i) for i in [lo, hi), from a copy of f that lives in this loop alone: the compiler then knows
// that the loop's stores cannot change what f captured. Called through a reference to a shared
// f, as Kokkos' OpenMP backend calls a kernel, a float store might alias a float f captured (a
// learning rate, say), which forces a reload every element and keeps the loop from vectorizing
// (AdamW ran 2.5x slower). Copying f copies the Views it captured: on Kokkos' OpenMP backend
// their reference counts are atomic.
template <class F>
void run_range(const F& f, int64_t lo, int64_t hi) {
  const F local = f;
  for (int64_t i = lo; i < hi; ++i) local(i);
}

// f(i) for i in [0, n): on the host one contiguous piece per thread (pieces only when n >=
// min_split), on a GPU a thread per i.
template <class F>
void launch(const char* label, int64_t n, int64_t min_split, const F& f) {
  const profile::Scope timer(label);
  if constexpr (kDeviceMemory) {
    Kokkos::parallel_for(label, Kokkos::RangePolicy<ExecSpace, int64_t>(0, n), f);
  } else {
    const int64_t pieces = n >= min_split ? std::min<int64_t>(n, host_thread_count()) : 1;
#ifdef KOKKOS_ENABLE_SERIAL
    if constexpr (kSplitOverOpenMP) {
      // Kokkos' Serial dispatch copies f into the kernel itself, with the Views' reference
      // counting off for this thread (a Serial-only Kokkos counts without atomics).
      if (pieces > 1) {
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
    Kokkos::parallel_for(
        label, Kokkos::RangePolicy<ExecSpace, int64_t>(0, pieces),
        [=](int64_t piece) { run_range(f, n * piece / pieces, n * (piece + 1) / pieces); });
  }
}

// A team per row: on a GPU 32 threads (a warp) for every 128 elements of a row, up to 256
// threads, as vector lanes of 32; on the host as many threads as the execution space allows in a
// team, up to 4 (1 on Serial).
TeamPolicy row_policy(int64_t rows, int64_t width);
}  // namespace detail

// f(i) for i in [0, n), i an element: cheap, so short ranges are not worth a fork/join.
template <class F>
void for_each(const char* label, int64_t n, const F& f) {
  detail::launch(label, n, 1 << 12, f);
}

// f(i) for i in [0, n), each i a lot of work (a column summed down every row, say): cut over the
// threads however short the range. Host-shaped; a GPU kernel needs more than n threads.
template <class F>
void for_each_heavy(const char* label, int64_t n, const F& f) {
  detail::launch(label, n, 2, f);
}

// f(unit, thread) for unit in [0, n): large units of unequal cost on the host threads, each
// taken by whichever thread is free next, in ascending order (so put the costly ones first);
// `thread` in [0, host_thread_count()) names the caller's scratch. A unit's result must not
// depend on the thread that runs it, so the bits do not depend on the thread count. Host memory
// only: the fused attention's host shape.
template <class F>
void for_each_unit_on_host(const char* label, int64_t n, const F& f) {
  const profile::Scope timer(label);
  std::atomic<int64_t> next{0};
#pragma omp parallel
  {
    const int thread = host_thread_id();
    for (int64_t unit = next++; unit < n; unit = next++) f(unit, thread);
  }
}

// f(r, c) for every element of a (rows, cols) matrix, row-major. Host shape: rows cut over the
// threads, each row's columns in an inner loop; device shape: a thread per element.
template <class F>
void for_each_2d(const char* label, int64_t rows, int cols, const F& f) {
  if (device_shaped()) {
    detail::launch(
        label, rows * cols, 1 << 12, KOKKOS_LAMBDA(int64_t i) { f(i / cols, int(i % cols)); });
  } else {
    detail::launch(
        label, rows, 2, KOKKOS_LAMBDA(int64_t r) {
          for (int c = 0; c < cols; ++c) f(r, c);
        });
  }
}

// body(row, r) for r in [0, rows), a row of `width` elements whose loops and reductions go
// through `row` (Row above).
template <class F>
void for_rows(const char* label, int64_t rows, int64_t width, const F& body) {
  if (!device_shaped()) {
    detail::launch(
        label, rows, 2, KOKKOS_LAMBDA(int64_t r) { body(Row(nullptr), r); });
    return;
  }
  const profile::Scope timer(label);
  Kokkos::parallel_for(
      label, detail::row_policy(rows, width),
      KOKKOS_LAMBDA(const TeamMember& team) { body(Row(&team), int64_t(team.league_rank())); });
}

// x[0, n) = value, over all threads (Kokkos::deep_copy of a scalar is one thread on Serial).
inline void fill(float* x, int64_t n, float value) {
  for_each(
      "mpf::fill", n, KOKKOS_LAMBDA(int64_t i) { x[i] = value; });
}

// Column sums: for each of `cols` columns, out[k][c] += Σ over rows n of the k-th value f(n, c)
// sets (K values per element: a weight and a bias gradient, say), in a fixed order:
//   host shape:   blocks of 32 columns, each summing down all rows in 32 partial sums per value;
//   device shape: a thread per (block of 64 rows, column) sums its rows into a scratch partial,
//                 then a thread per column adds the blocks' partials in order.
// f(n, c, v) writes v[0..K).
template <int K>
struct ColumnSums {
  float* out[K];
};
namespace detail {
inline constexpr int kColumnBlock = 32;
inline constexpr int kRowBlock = 64;
// Scratch for the device shape's partials: grown when needed, kept, freed when Kokkos finalizes.
float* column_scratch(int64_t n);
}  // namespace detail
template <int K, class F>
void add_column_sums(const char* label, int64_t rows, int cols, const F& f, ColumnSums<K> out) {
  if (!device_shaped()) {
    constexpr int B = detail::kColumnBlock;
    const int nblocks = (cols + B - 1) / B;
    detail::launch(
        label, nblocks, 2, KOKKOS_LAMBDA(int64_t blk) {
          const int c0 = int(blk) * B, c1 = c0 + B < cols ? c0 + B : cols;
          float acc[K][B] = {};
          for (int64_t n = 0; n < rows; ++n) {
            for (int c = c0; c < c1; ++c) {
              float v[K];
              f(n, c, v);
              for (int k = 0; k < K; ++k) acc[k][c - c0] += v[k];
            }
          }
          for (int k = 0; k < K; ++k) {
            for (int c = c0; c < c1; ++c) out.out[k][c] += acc[k][c - c0];
          }
        });
    return;
  }
  constexpr int64_t R = detail::kRowBlock;
  const int64_t row_blocks = (rows + R - 1) / R;
  float* partial = detail::column_scratch(row_blocks * cols * K);  // (row_blocks, K, cols)
  const profile::Scope timer(label);
  Kokkos::parallel_for(
      label, Kokkos::RangePolicy<ExecSpace, int64_t>(0, row_blocks * cols),
      KOKKOS_LAMBDA(int64_t i) {
        const int64_t rb = i / cols;
        const int c = int(i % cols);
        const int64_t n0 = rb * R, n1 = n0 + R < rows ? n0 + R : rows;
        float acc[K] = {};
        for (int64_t n = n0; n < n1; ++n) {
          float v[K];
          f(n, c, v);
          for (int k = 0; k < K; ++k) acc[k] += v[k];
        }
        for (int k = 0; k < K; ++k) partial[(rb * K + k) * cols + c] = acc[k];
      });
  Kokkos::parallel_for(
      label, Kokkos::RangePolicy<ExecSpace, int64_t>(0, cols), KOKKOS_LAMBDA(int64_t c) {
        for (int k = 0; k < K; ++k) {
          float s = 0.0f;
          for (int64_t rb = 0; rb < row_blocks; ++rb) s += partial[(rb * K + k) * cols + c];
          out.out[k][c] += s;
        }
      });
}

// Σ f(i) for i in [0, n), in double, in an order fixed by n alone: blocks of kSumBlock elements
// (16 lanes within a block on the host, a team reduction on a device), then the block sums in
// order. The host shape gives the same bits for any thread count.
inline constexpr int64_t kSumBlock = 1 << 14;

namespace detail {
// The block sums' scratch: room for a total and nblocks block sums after it (the pointer is to
// the block sums); grown when a sum needs more, kept for the next (a training step allocates
// nothing), released when Kokkos finalizes. One sum runs at a time.
double* sum_scratch(int64_t nblocks);

// One block's sum: f(i) for i in [lo, hi) in 16 lanes (host shape), or over the team (device).
template <class F>
KOKKOS_INLINE_FUNCTION double lane_block_sum(const F& f, int64_t lo, int64_t hi) {
  constexpr int kLanes = 16;
  double lane[kLanes] = {};
  int64_t i = lo;
  for (; i + kLanes <= hi; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) lane[k] += f(i + k);
  }
  double acc = 0.0;
  for (int k = 0; k < kLanes; ++k) acc += lane[k];
  for (; i < hi; ++i) acc += f(i);
  return acc;
}
template <class F>
KOKKOS_INLINE_FUNCTION double team_block_sum(const TeamMember& team, const F& f, int64_t lo,
                                             int len) {
  double s = 0.0;
  Kokkos::parallel_reduce(
      Kokkos::TeamVectorRange(team, len), [&](int j, double& acc) { acc += f(lo + j); }, s);
  return s;
}
}  // namespace detail

// Adds Σ f(i) to *total, a double in the kernels' memory, without reading it to the host: a step
// adds up its losses, or its gradient norm's pieces, on the device and reads the result once.
template <class F>
void sum_into(const char* label, int64_t n, const F& f, double* total) {
  const int64_t nblocks = (n + kSumBlock - 1) / kSumBlock;
  double* partial = detail::sum_scratch(nblocks);
  if (!device_shaped()) {
    detail::launch(
        label, nblocks, 2, KOKKOS_LAMBDA(int64_t blk) {
          const int64_t lo = blk * kSumBlock, hi = lo + kSumBlock < n ? lo + kSumBlock : n;
          partial[blk] = detail::lane_block_sum(f, lo, hi);
        });
  } else {
    const profile::Scope timer(label);
    Kokkos::parallel_for(
        label, detail::row_policy(nblocks, kSumBlock), KOKKOS_LAMBDA(const TeamMember& team) {
          const int64_t lo = int64_t(team.league_rank()) * kSumBlock;
          const int len = int(lo + kSumBlock < n ? kSumBlock : n - lo);
          const double s = detail::team_block_sum(team, f, lo, len);
          Kokkos::single(Kokkos::PerTeam(team), [&] { partial[team.league_rank()] = s; });
        });
  }
  // The block sums in order, by one thread: a few thousand at most.
  Kokkos::parallel_for(
      "mpf::sum::blocks", Kokkos::RangePolicy<ExecSpace, int64_t>(0, 1), KOKKOS_LAMBDA(int64_t) {
        double acc = 0.0;
        for (int64_t b = 0; b < nblocks; ++b) acc += partial[b];
        *total += acc;
      });
}

// Many sums in two launches, whatever the number of pieces: each piece (a run of f's indices) is
// cut into blocks as sum_into cuts it, so its sum and the order it is added in are sum_into's.
// A table of SumBlock (in the kernels' memory) lists every piece's blocks, piece after piece;
// `last` marks a piece's last block, whose piece sum is added to totals[total].
struct SumBlock {
  int64_t first;  // f's index of the block's first element
  int len;        // 1 to kSumBlock
  int total;
  int last;
};
// Appends the blocks of the piece [first, first + n) to `blocks` (none when n is 0).
void append_sum_blocks(std::vector<SumBlock>& blocks, int64_t first, int64_t n, int total);

// totals[0, ntotals) = 0, then, piece by piece in the table's order, totals[t] += Σ f(i) over the
// piece: each piece's sum and the totals' bits are those of zeroing the totals and calling
// sum_into for each piece in turn. The first launch sums each block (as sum_into does), the
// second, one thread, adds each piece's blocks in order and the pieces to their totals.
template <class F>
void sum_pieces_into(const char* label, const SumBlock* blocks, int64_t nblocks, const F& f,
                     double* totals, int ntotals) {
  double* partial = detail::sum_scratch(nblocks);
  if (nblocks > 0) {
    if (!device_shaped()) {
      detail::launch(
          label, nblocks, 2, KOKKOS_LAMBDA(int64_t b) {
            const SumBlock blk = blocks[b];
            partial[b] = detail::lane_block_sum(f, blk.first, blk.first + blk.len);
          });
    } else {
      const profile::Scope timer(label);
      Kokkos::parallel_for(
          label, detail::row_policy(nblocks, kSumBlock), KOKKOS_LAMBDA(const TeamMember& team) {
            const SumBlock blk = blocks[team.league_rank()];
            const double s = detail::team_block_sum(team, f, blk.first, blk.len);
            Kokkos::single(Kokkos::PerTeam(team), [&] { partial[team.league_rank()] = s; });
          });
    }
  }
  Kokkos::parallel_for(
      "mpf::sum::pieces", Kokkos::RangePolicy<ExecSpace, int64_t>(0, 1), KOKKOS_LAMBDA(int64_t) {
        for (int t = 0; t < ntotals; ++t) totals[t] = 0.0;
        double acc = 0.0;
        for (int64_t b = 0; b < nblocks; ++b) {
          acc += partial[b];
          if (blocks[b].last) {
            totals[blocks[b].total] += acc;
            acc = 0.0;
          }
        }
      });
}

// The same sum, read to the host (one read of the kernels' memory, counted under `label`).
template <class F>
double sum(const char* label, int64_t n, const F& f) {
  // The scratch's double before the block sums holds the total.
  double* total = detail::sum_scratch((n + kSumBlock - 1) / kSumBlock) - 1;
  Kokkos::parallel_for(
      "mpf::sum::zero", Kokkos::RangePolicy<ExecSpace, int64_t>(0, 1),
      KOKKOS_LAMBDA(int64_t) { *total = 0.0; });
  sum_into(label, n, f, total);
  return read_to_host(total, label);
}

}  // namespace mpf
