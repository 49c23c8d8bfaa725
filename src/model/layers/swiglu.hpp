// SwiGLU (Shazeer 2020), the gated MLP activation of Llama, Qwen2 and Mistral:
// silu(gate) · up with silu(x) = x · sigmoid(x). Its input is the packed output of the stacked
// gate_proj and up_proj: each row [gate (F) | up (F)], F a tensor-parallel rank's share.
#pragma once

#include "core/bf16.hpp"
#include "core/types.hpp"

namespace mpf {

// out (N,F) = silu(gate) · up, from inp (N,2F) rows [gate | up]
void swiglu_forward(Tensor out, Tensor inp, int64_t N, int F);

// The same writing out rounded to bf16 (an activation kept in bf16, model/activations.hpp).
void swiglu_forward(Tensor16 out, Tensor inp, int64_t N, int F);
// From an input kept in bf16 too ([gate | up], fch): computed in fp32, written rounded.
void swiglu_forward(Tensor16 out, Tensor16 inp, int64_t N, int F);

// dinp (N,2F) = [dgate | dup] from dout (N,F) and the forward's inp (N,2F); dinp may alias inp
void swiglu_backward_input(Tensor dinp, Tensor dout, Tensor inp, int64_t N, int F);
void swiglu_backward_input(Tensor dinp, Tensor dout, Tensor16 inp, int64_t N, int F);

}  // namespace mpf
