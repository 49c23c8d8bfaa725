// Token + position embedding. Its only backward is the weight gradient: tokens have no gradient.
#pragma once

#include "core/types.hpp"

namespace mpf {

// out (B,T,C) = wte[tokens[b,t]] + wpe[t]; tokens (B,T), wte (Vp,C), wpe (maxT,C)
void encoder_forward(Tensor out, const Tokens& tokens, Tensor wte, Tensor wpe, int B, int T, int C);

// dwte[tokens[b,t]] += dout[b,t]; dwpe[t] += Σ_b dout[b,t]; dout (B,T,C)
void encoder_backward_weight(Tensor dwte, Tensor dwpe, Tensor dout, const Tokens& tokens, int B,
                             int T, int C);

}  // namespace mpf
