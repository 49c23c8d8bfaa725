// LayerNorm over the channel dimension, eps 1e-5 (GPT-2).
#pragma once

#include "core/types.hpp"

namespace mpf {

// out (N,C) = (inp - mean) * rstd * weight + bias; saves mean (N) and rstd (N) for backward
void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight, Tensor bias,
                       int64_t N, int C);

// dinp (N,C) = dresidual + ∂out/∂inp ᵀ · dout. The residual stream's gradient arrives as
// dresidual (may alias dinp; an empty view means zero), so the add costs no extra pass.
void layernorm_backward_input(Tensor dinp, Tensor dresidual, Tensor dout, Tensor inp, Tensor mean,
                              Tensor rstd, Tensor weight, int64_t N, int C);

// dweight (C) += Σ_n dout * xhat; dbias (C) += Σ_n dout
void layernorm_backward_weight(Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor mean,
                               Tensor rstd, int64_t N, int C);

}  // namespace mpf
