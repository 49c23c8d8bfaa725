// RMSNorm of the whole Q and K projections (OLMo-2's q_norm and k_norm), applied to the
// projection's output before the rotary embeddings: a row's NH·hs query values x become
// x · rstd · w with rstd = 1/√(mean(x²) + eps) over all of them, and its KVH·hs key values
// likewise with their own weight. Unlike the per-head norms (head_norm.hpp) a row's statistics
// span every head, so under tensor parallelism each rank sums its heads' part and the sums are
// all-reduced over TP, forward (Σx²) and backward (Σw·dy·x). A kv head replicated on several
// ranks is in each of their sums: its K part is divided by the replicas. The backward's K sum is
// divided the same way because each replica holds only its query heads' share of dy, and the
// replicas' input gradients are summed later (the projection's gradients).
#pragma once

#include <mpi.h>

#include <cstdint>

#include "core/types.hpp"

namespace mpf {

struct ProjectionNormShape {
  int64_t rows = 0;                  // R
  int64_t ld = 0;                    // the packed [Q | K | V] row's width
  int q = 0, k = 0;                  // this rank's Q and K widths, from column 0 and column q
  int64_t q_full = 0, k_full = 0;    // the whole projections' widths, NH·hs and KVH·hs
  int64_t q_first = 0, k_first = 0;  // this rank's first column in each weight
  int kv_replicas = 1;               // TP ranks holding each kv head
};

// In place on qkv's Q and K; raw (R, q + k) keeps the values before, rstd (R, 2) each row's Q
// and K 1/rms, for the backward.
void projection_rmsnorm_forward(Tensor qkv, Tensor raw, Tensor rstd, Tensor q_weight,
                                Tensor k_weight, const ProjectionNormShape& s, float eps,
                                MPI_Comm tp);

// dweights (q + k) = Σ over rows of dy·x̂ for this rank's columns of the two weights, where dqkv
// holds dy, the gradient of the normalised values; call it before the input backward overwrites
// them. Column sums in the fixed order of core/parallel.hpp.
void projection_rmsnorm_backward_weight(Tensor dweights, Tensor dqkv, Tensor raw, Tensor rstd,
                                        const ProjectionNormShape& s);

// In place: dqkv's Q and K from the gradient of the normalised values to that of the raw ones.
// sums (R, 2) is scratch for the rows' Σw·dy·x.
void projection_rmsnorm_backward_input(Tensor dqkv, Tensor sums, Tensor raw, Tensor rstd,
                                       Tensor q_weight, Tensor k_weight,
                                       const ProjectionNormShape& s, MPI_Comm tp);

}  // namespace mpf
