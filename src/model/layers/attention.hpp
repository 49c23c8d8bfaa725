// Causal multi-head self-attention on llm.c's packed qkv (B,T,3C): per head, S = Q·Kᵀ/√hs,
// P = softmax over the causal prefix, out = P·V. The per-head products go to the backend's
// batched GEMM straight from the packed layout (row strides 3C and C), so nothing is permuted.
// Attention has no parameters: its whole backward is an input gradient.
#pragma once

#include "core/types.hpp"

namespace mpf {

// out (B,T,C); att (B,NH,T,T) keeps P for backward (zero above the diagonal); qkv (B,T,3C)
void attention_forward(Tensor out, Tensor att, Tensor qkv, int B, int T, int C, int NH);

// dqkv (B,T,3C) =; datt (B,NH,T,T) is scratch; dout (B,T,C); qkv and att as saved by forward
void attention_backward_input(Tensor dqkv, Tensor datt, Tensor dout, Tensor qkv, Tensor att, int B,
                              int T, int C, int NH);

}  // namespace mpf
