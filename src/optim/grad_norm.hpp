// Global gradient-norm clipping (Megatron / torch.nn.utils.clip_grad_norm_): the norm is taken
// over every gradient element on every rank that owns distinct ones, then all gradients are
// scaled by clip/(norm + 1e-6) when that is below 1. The scale is applied inside AdamW.
#pragma once

#include <vector>

#include "core/types.hpp"

namespace mpf {

// Σ g² over the pieces of a rank's gradients, added up in the kernels' memory (in double, each
// piece in an order fixed by its length: core/parallel.hpp sum_into) and read to the host once:
// one read a step, however many pieces.
class SumOfSquares {
 public:
  // sums: separate sums kept side by side (a mixture of experts' experts and the rest), read
  // together.
  explicit SumOfSquares(int sums = 1);
  // Starts new sums (0).
  void reset();
  void add(const float* g, int64_t n, int sum = 0);
  // The first sum so far, on the host (counted by --profile as "d2h gradient norm").
  double read() const;
  // Every sum, in one read.
  std::vector<double> read_all() const;

 private:
  Kokkos::View<double*, MemSpace> total_;  // one element
};

// Σ g² over n elements: a SumOfSquares of one piece.
double sum_of_squares(const float* g, int64_t n);

// The factor to multiply gradients by: 1 when clip <= 0 (off) or norm <= clip.
float clip_scale(double norm, float clip);

}  // namespace mpf
