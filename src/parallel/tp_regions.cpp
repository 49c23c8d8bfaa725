#include "parallel/tp_regions.hpp"

#include <Kokkos_Core.hpp>

#include "parallel/grid.hpp"

namespace mpf::tp {

void copy_to_region_backward(float* grad, int64_t n, MPI_Comm tp) {
  Kokkos::fence();  // the kernels that produced grad must be done before MPI reads it
  allreduce_sum(grad, n, tp);
}

void reduce_from_region_forward(float* x, int64_t n, MPI_Comm tp) {
  Kokkos::fence();
  allreduce_sum(x, n, tp);
}

}  // namespace mpf::tp
