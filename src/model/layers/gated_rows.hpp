// Rows scaled by a per-row sigmoid gate (Qwen2-MoE's shared expert: its output y times
// sigmoid(x · w_gate), one gate a token).
#pragma once

#include <cstdint>

#include "core/bf16.hpp"
#include "core/types.hpp"

namespace mpf {

// In place: gate (R) from its logits to their sigmoid.
void sigmoid_gate_forward(Tensor gate, int64_t R);
// out (R,C) += gate[r] · y[r,:].
void add_gated_rows(Tensor out, Tensor y, Tensor gate, int64_t R, int C);
// The same from a y kept in bf16, gated as autocast gates a bf16 tensor: the gate cast to bf16,
// the product rounded to bf16, added in fp32.
void add_gated_rows(Tensor out, Tensor16 y, Tensor gate, int64_t R, int C);
// dgate (R): this rank's part of Σ_c dout[r,c] · y[r,c] (y may be a partial sum over TP; the
// caller sums dgate over TP), and dy (R,C) = gate[r] · dout[r,:].
void gated_rows_backward(Tensor dgate, Tensor dy, Tensor dout, Tensor y, Tensor gate, int64_t R,
                         int C);
// The same for a y kept in bf16: dy from the gate as the forward read it (cast to bf16).
void gated_rows_backward(Tensor dgate, Tensor dy, Tensor dout, Tensor16 y, Tensor gate, int64_t R,
                         int C);
// In place: dgate (R) from the gate's gradient to its logit's, · g (1 - g).
void sigmoid_gate_backward(Tensor dgate, Tensor gate, int64_t R);

}  // namespace mpf
