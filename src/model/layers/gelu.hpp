// GELU, tanh approximation (GPT-2): 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
#pragma once

#include "core/bf16.hpp"
#include "core/types.hpp"

namespace mpf {

// out (N) = gelu(inp)
void gelu_forward(Tensor out, Tensor inp, int64_t N);

// inp (N,C) += bias (C), then out (N,C) = gelu(inp): a linear layer's bias and GELU in one pass
void bias_gelu_forward(Tensor out, Tensor inp, Tensor bias, int64_t N, int C);

// The same writing out rounded to bf16 (an activation kept in bf16, model/activations.hpp).
void gelu_forward(Tensor16 out, Tensor inp, int64_t N);
void bias_gelu_forward(Tensor16 out, Tensor inp, Tensor bias, int64_t N, int C);
// From an input kept in bf16 too (the MLP's fc output, fch): computed in fp32, written rounded.
void gelu_forward(Tensor16 out, Tensor16 inp, int64_t N);

// dinp (N) = gelu'(inp) · dout; dinp may alias dout
void gelu_backward_input(Tensor dinp, Tensor dout, Tensor inp, int64_t N);
void gelu_backward_input(Tensor dinp, Tensor dout, Tensor16 inp, int64_t N);

}  // namespace mpf
