// Global gradient-norm clipping (Megatron / torch.nn.utils.clip_grad_norm_): the norm is taken
// over every gradient element on every rank that owns distinct ones, then all gradients are
// scaled by clip/(norm + 1e-6) when that is below 1. The scale is applied inside AdamW.
#pragma once

#include <vector>

#include "core/parallel.hpp"
#include "core/types.hpp"

namespace mpf {

// Σ g² over the pieces of a rank's gradients, added up in the kernels' memory (in double, each
// piece in an order fixed by its length: core/parallel.hpp sum_pieces_into) and read to the host
// once: two launches and one read a step, however many pieces (GPT-2 124M has 148). The pieces
// are summed when read; their table of blocks goes to the kernels' memory when they change (the
// first step), not every step.
class SumOfSquares {
 public:
  // sums: separate sums kept side by side (a mixture of experts' experts and the rest), read
  // together.
  explicit SumOfSquares(int sums = 1);
  // Starts new sums (0): forgets the pieces added.
  void reset();
  // A piece, read at the next read (it must not change before).
  void add(const float* g, int64_t n, int sum = 0);
  // The first sum so far, on the host (counted by --profile as "d2h gradient norm").
  double read();
  // Every sum, in one read.
  std::vector<double> read_all();

 private:
  struct Piece {
    const float* g;
    int64_t n;
    int sum;
    bool operator==(const Piece& o) const { return g == o.g && n == o.n && sum == o.sum; }
  };
  std::vector<Piece> pieces_;    // added since the last reset
  std::vector<Piece> tabled_;    // the pieces blocks_ lists
  const float* base_ = nullptr;  // blocks_' indices are from here
  Kokkos::View<SumBlock*, MemSpace> blocks_;
  Kokkos::View<double*, MemSpace> total_;  // one element per sum
};

// Σ g² over n elements: a SumOfSquares of one piece.
double sum_of_squares(const float* g, int64_t n);

// The factor to multiply gradients by: 1 when clip <= 0 (off) or norm <= clip.
float clip_scale(double norm, float clip);

}  // namespace mpf
