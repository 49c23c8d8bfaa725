#include "parallel/tp_regions.hpp"

#include "parallel/device_mpi.hpp"

namespace mpf::tp {

void copy_to_region_backward(float* grad, int64_t n, MPI_Comm tp) {
  allreduce_sum(grad, n, tp);
}

void reduce_from_region_forward(float* x, int64_t n, MPI_Comm tp) {
  allreduce_sum(x, n, tp);
}

void enter_forward(float* full, int C, const SequenceSplit& s, MPI_Comm tp) {
  if (!s.on) return;
  allgather_in_place(full, s.local_rows * C, tp);
}

void enter_backward(float* partial, float* local, int C, const SequenceSplit& s, MPI_Comm tp) {
  if (!s.on) return copy_to_region_backward(partial, s.rows * C, tp);
  reduce_scatter_block(partial, local, s.local_rows * C, tp);
}

void leave_forward(float* partial, float* local, int C, const SequenceSplit& s, MPI_Comm tp) {
  if (!s.on) return reduce_from_region_forward(partial, s.rows * C, tp);
  reduce_scatter_block(partial, local, s.local_rows * C, tp);
}

void leave_backward(const float* local, float* full, int C, const SequenceSplit& s, MPI_Comm tp) {
  if (!s.on) return;
  allgather(local, full, s.local_rows * C, tp);
}

}  // namespace mpf::tp
