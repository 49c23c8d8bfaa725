// Tensor-parallel regions as forward/backward pairs (Megatron, Shoeybi et al. 2019, §3; sequence
// parallelism, Korthikanti et al. 2022):
//   f = copy_to_tp_region:     forward identity,   backward all-reduce   (enters a column-parallel
//                                                                          layer)
//   g = reduce_from_tp_region: forward all-reduce, backward identity     (leaves a row-parallel
//                                                                          layer)
// With sequence parallelism the regions outside the TP layers (LayerNorm, residual) hold only
// this rank's rows of the batch, and f and g become
//   gather_from_sequence_region:       forward all-gather,     backward reduce-scatter
//   reduce_scatter_to_sequence_region: forward reduce-scatter, backward all-gather
// enter_*/leave_* pick the pair for the run's mode; the model calls them where the paper puts f
// and g. A 1-rank communicator returns at once. Their payloads travel in fp32, or (SequenceSplit's
// bf16, --tp-comm-dtype bf16) rounded to bf16 as Megatron's under bf16 training, sums added in
// fp32 pair by pair (parallel/device_mpi.hpp).
#pragma once

#include <mpi.h>

#include <cstdint>

namespace mpf::tp {

// f's backward: the gradient of a replicated input of a column-parallel layer is the sum of every
// rank's partial gradient.
// bf16: the payload in bf16.
void copy_to_region_backward(float* grad, int64_t n, MPI_Comm tp, bool bf16 = false);

// g's forward: the output of a row-parallel layer is the sum of every rank's partial product.
void reduce_from_region_forward(float* x, int64_t n, MPI_Comm tp, bool bf16 = false);

// How the rows of a (rows, C) activation are split outside the TP layers, and how they cross.
struct SequenceSplit {
  bool on = false;         // sequence parallelism
  int64_t rows = 0;        // B·T
  int64_t local_rows = 0;  // rows / n_tp with sequence parallelism, else rows
  int64_t row_begin = 0;   // first row held here
  // --tp-comm-dtype bf16 on a TP group of 2 or more: every region's payload rounded to bf16. A
  // sum leaving a region then carries only the partial products; the fp32 residual and the bias
  // join after it (the residual stream is not rounded).
  bool bf16 = false;
};

// Entering a column-parallel layer. Forward: `full` (rows, C) holds this rank's rows at
// row_begin; afterwards all rows (all-gather in place). Without SP, identity.
void enter_forward(float* full, int C, const SequenceSplit& s, MPI_Comm tp);
// Backward: partial (rows, C) holds this rank's partial input gradient; `local` (local_rows, C)
// receives the summed gradient of this rank's rows (reduce-scatter). Without SP, local must be
// partial, which is all-reduced in place (f's backward).
void enter_backward(float* partial, float* local, int C, const SequenceSplit& s, MPI_Comm tp);

// Leaving a row-parallel layer. Forward: partial (rows, C) holds this rank's partial output;
// `local` (local_rows, C) receives this rank's rows of the sum (reduce-scatter). Without SP,
// local must be partial, which is all-reduced in place (g's forward).
void leave_forward(float* partial, float* local, int C, const SequenceSplit& s, MPI_Comm tp);
// Backward: `full` (rows, C) receives every rank's `local` rows (all-gather). Without SP, full
// must be local (g's backward is the identity).
void leave_backward(const float* local, float* full, int C, const SequenceSplit& s, MPI_Comm tp);

}  // namespace mpf::tp
