#include "parallel/tp_regions.hpp"

#include "parallel/device_mpi.hpp"

namespace mpf::tp {

void copy_to_region_backward(float* grad, int64_t n, MPI_Comm tp, bool bf16) {
  if (bf16) return allreduce_sum_bf16(grad, n, tp);
  allreduce_sum(grad, n, tp);
}

void reduce_from_region_forward(float* x, int64_t n, MPI_Comm tp, bool bf16) {
  if (bf16) return allreduce_sum_bf16(x, n, tp);
  allreduce_sum(x, n, tp);
}

namespace {
void reduce_scatter(const float* send, float* recv, int64_t count, const SequenceSplit& s,
                    MPI_Comm tp) {
  if (s.bf16) return reduce_scatter_block_bf16(send, recv, count, tp);
  reduce_scatter_block(send, recv, count, tp);
}
}  // namespace

void enter_forward(float* full, int C, const SequenceSplit& s, MPI_Comm tp) {
  if (!s.on) return;
  if (s.bf16) return allgather_in_place_bf16(full, s.local_rows * C, tp);
  allgather_in_place(full, s.local_rows * C, tp);
}

void enter_backward(float* partial, float* local, int C, const SequenceSplit& s, MPI_Comm tp) {
  if (!s.on) return copy_to_region_backward(partial, s.rows * C, tp, s.bf16);
  reduce_scatter(partial, local, s.local_rows * C, s, tp);
}

void leave_forward(float* partial, float* local, int C, const SequenceSplit& s, MPI_Comm tp) {
  if (!s.on) return reduce_from_region_forward(partial, s.rows * C, tp, s.bf16);
  reduce_scatter(partial, local, s.local_rows * C, s, tp);
}

void leave_backward(const float* local, float* full, int C, const SequenceSplit& s, MPI_Comm tp) {
  if (!s.on) return;
  if (s.bf16) return allgather_bf16(local, full, s.local_rows * C, tp);
  allgather(local, full, s.local_rows * C, tp);
}

}  // namespace mpf::tp
