#include "parallel/tp_regions.hpp"

#include <Kokkos_Core.hpp>
#include <climits>

#include "core/error.hpp"
#include "parallel/grid.hpp"

namespace mpf::tp {

namespace {
int count_of(int64_t n) {
  require(n <= INT_MAX, "a sequence-parallel block of over 2^31 floats is not supported");
  return static_cast<int>(n);
}
}  // namespace

void copy_to_region_backward(float* grad, int64_t n, MPI_Comm tp) {
  Kokkos::fence();  // the kernels that produced grad must be done before MPI reads it
  allreduce_sum(grad, n, tp);
}

void reduce_from_region_forward(float* x, int64_t n, MPI_Comm tp) {
  Kokkos::fence();
  allreduce_sum(x, n, tp);
}

void enter_forward(float* full, int C, const SequenceSplit& s, MPI_Comm tp) {
  if (!s.on) return;
  Kokkos::fence();
  MPF_MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, full, count_of(s.local_rows * C),
                              MPI_FLOAT, tp));
}

void enter_backward(float* partial, float* local, int C, const SequenceSplit& s, MPI_Comm tp) {
  if (!s.on) return copy_to_region_backward(partial, s.rows * C, tp);
  Kokkos::fence();
  MPF_MPI_CHECK(
      MPI_Reduce_scatter_block(partial, local, count_of(s.local_rows * C), MPI_FLOAT, MPI_SUM, tp));
}

void leave_forward(float* partial, float* local, int C, const SequenceSplit& s, MPI_Comm tp) {
  if (!s.on) return reduce_from_region_forward(partial, s.rows * C, tp);
  Kokkos::fence();
  MPF_MPI_CHECK(
      MPI_Reduce_scatter_block(partial, local, count_of(s.local_rows * C), MPI_FLOAT, MPI_SUM, tp));
}

void leave_backward(const float* local, float* full, int C, const SequenceSplit& s, MPI_Comm tp) {
  if (!s.on) return;
  Kokkos::fence();
  MPF_MPI_CHECK(MPI_Allgather(local, count_of(s.local_rows * C), MPI_FLOAT, full,
                              count_of(s.local_rows * C), MPI_FLOAT, tp));
}

}  // namespace mpf::tp
