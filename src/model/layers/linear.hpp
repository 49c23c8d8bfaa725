// A linear layer through the backend GEMM: weight (OC, IC) row-major, out = inp · weightᵀ + bias.
#pragma once

#include "core/bf16.hpp"
#include "core/types.hpp"

namespace mpf {

// out (N,OC) = [residual (N,OC) +] inp (N,IC) · weightᵀ [+ bias (OC)]. An empty residual or bias
// view means none; the residual add is fused so a block's output needs no separate pass.
void linear_forward(Tensor out, Tensor residual, Tensor inp, Tensor weight, Tensor bias, int64_t N,
                    int IC, int OC);

// pre (N,OC) = inp (N,IC) · weightᵀ + bias (OC), kept for the backward; out (N,OC) = GELU(pre).
// The MLP's first layer: on a GPU the bias is added in GELU's pass.
void linear_gelu_forward(Tensor pre, Tensor out, Tensor inp, Tensor weight, Tensor bias, int64_t N,
                         int IC, int OC);

// out (N,OC) += inp (N,IC) · weightᵀ (a row-parallel layer adds onto its seeded output)
void linear_forward_accumulate(Tensor out, Tensor inp, Tensor weight, int64_t N, int IC, int OC);

// dinp (N,IC) = dout (N,OC) · weight
void linear_backward_input(Tensor dinp, Tensor dout, Tensor weight, int64_t N, int IC, int OC);

// dweight (OC,IC) += doutᵀ · inp; dbias (OC) += Σ_n dout (skipped for an empty dbias)
void linear_backward_weight(Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, int64_t N,
                            int IC, int OC);

// The same with an input kept in bf16 (Activations under --precision bf16), which the products
// read as it is; GELU's output is then written rounded to bf16. Only in a Bf16Products scope.
void linear_forward(Tensor out, Tensor residual, Tensor16 inp, Tensor weight, Tensor bias,
                    int64_t N, int IC, int OC);
void linear_gelu_forward(Tensor pre, Tensor16 out, Tensor16 inp, Tensor weight, Tensor bias,
                         int64_t N, int IC, int OC);
void linear_forward_accumulate(Tensor out, Tensor16 inp, Tensor weight, int64_t N, int IC, int OC);
void linear_backward_weight(Tensor dweight, Tensor dbias, Tensor dout, Tensor16 inp, int64_t N,
                            int IC, int OC);

// The LM head's under --precision bf16: its logits written in bf16 (no bias, no residual) and
// their gradient, written over them in bf16, read as it is by both backward products.
void linear_forward(Tensor16 out, Tensor inp, Tensor weight, int64_t N, int IC, int OC);
// A mixture of experts' fc product: input and output kept in bf16 (no bias).
void linear_forward(Tensor16 out, Tensor16 inp, Tensor weight, int64_t N, int IC, int OC);
void linear_backward_input(Tensor dinp, Tensor16 dout, Tensor weight, int64_t N, int IC, int OC);
void linear_backward_weight(Tensor dweight, Tensor16 dout, Tensor inp, int64_t N, int IC, int OC);

}  // namespace mpf
