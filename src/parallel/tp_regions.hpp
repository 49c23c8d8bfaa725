// Tensor-parallel regions as forward/backward pairs (Megatron, Shoeybi et al. 2019, §3):
//   f = copy_to_tp_region:     forward identity,   backward all-reduce   (enters a column-parallel
//                                                                          layer)
//   g = reduce_from_tp_region: forward all-reduce, backward identity     (leaves a row-parallel
//                                                                          layer)
// The identity halves need no call; the model calls the all-reduce half where the paper puts f
// and g, and a size-1 communicator returns at once.
#pragma once

#include <mpi.h>

#include <cstdint>

namespace mpf::tp {

// f's backward: the gradient of a replicated input of a column-parallel layer is the sum of every
// rank's partial gradient.
void copy_to_region_backward(float* grad, int64_t n, MPI_Comm tp);

// g's forward: the output of a row-parallel layer is the sum of every rank's partial product.
void reduce_from_region_forward(float* x, int64_t n, MPI_Comm tp);

}  // namespace mpf::tp
