// RMSNorm over the channel dimension (Zhang & Sennrich 2019), Llama's normalisation: no mean is
// removed and there is no bias, out = inp · rstd · weight with rstd = 1/√(mean(inp²) + eps).
#pragma once

#include "core/types.hpp"

namespace mpf {

// out (N,C) = inp · rstd · weight; saves rstd (N) for backward
void rmsnorm_forward(Tensor out, Tensor rstd, Tensor inp, Tensor weight, int64_t N, int C,
                     float eps);

// dinp (N,C) = dresidual + ∂out/∂inp ᵀ · dout. As layernorm_backward_input: dresidual (N,C) may
// alias dinp, and an empty view means zero.
void rmsnorm_backward_input(Tensor dinp, Tensor dresidual, Tensor dout, Tensor inp, Tensor rstd,
                            Tensor weight, int64_t N, int C);

// dweight (C) += Σ_n dout · inp · rstd, in layernorm_backward_weight's fixed column-sum order
void rmsnorm_backward_weight(Tensor dweight, Tensor dout, Tensor inp, Tensor rstd, int64_t N,
                             int C);

}  // namespace mpf
