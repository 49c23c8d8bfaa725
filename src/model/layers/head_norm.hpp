// RMSNorm of each query and key head (Qwen3's q_norm and k_norm), applied to the projection's
// output before the rotary embeddings: each head's hs values x become x · rstd · w, rstd =
// 1/√(mean(x²) + eps), with one weight vector of hs for all query heads and one for all key heads.
// The heads lie in the packed rows [Q | K | V] (row stride ld): NQ query heads from column 0,
// then NK key heads; V is untouched. A head is normalised on its own, so tensor parallelism needs
// no communication in the forward; the weights' gradients are summed over the TP ranks after W.
#pragma once

#include <cstdint>

#include "core/types.hpp"

namespace mpf {

struct HeadNormShape {
  int64_t rows = 0;  // R
  int64_t ld = 0;    // the packed row's width
  int NQ = 0, NK = 0, hs = 0;
  KOKKOS_INLINE_FUNCTION int heads() const { return NQ + NK; }
};

// In place on qkv's Q and K heads; raw (R, (NQ+NK)·hs) keeps the values before, rstd (R·(NQ+NK))
// each head's 1/rms, for the backward.
void head_rmsnorm_forward(Tensor qkv, Tensor raw, Tensor rstd, Tensor q_weight, Tensor k_weight,
                          const HeadNormShape& s, float eps);

// dweights (2·hs) = [Σ dy·x̂ over the query heads | over the key heads], where dqkv holds dy, the
// gradient of the normalised heads; call it before head_rmsnorm_backward_input overwrites them.
// Column sums in the fixed order of core/parallel.hpp.
void head_rmsnorm_backward_weight(Tensor dweights, Tensor dqkv, Tensor raw, Tensor rstd,
                                  const HeadNormShape& s);

// In place: dqkv's Q and K heads from the gradient of the normalised values to that of the raw.
void head_rmsnorm_backward_input(Tensor dqkv, Tensor raw, Tensor rstd, Tensor q_weight,
                                 Tensor k_weight, const HeadNormShape& s);

}  // namespace mpf
