// The unfused causal attention, the fused kernel's oracle in the tests (and nowhere else): S =
// Q·Kᵀ for every head as strided batched products straight from the packed qkv, a causal softmax
// over each row, out = P·V; the backward from the kept probabilities. Grouped heads as in
// model/layers/attention.hpp; in bf16 each product's operands are rounded (matmul.hpp).
#pragma once

#include "core/types.hpp"

namespace mpf::test {

// out (B,T,NH·hs); att (B,NH,T,T) keeps P (zero above the diagonal); qkv (B,T,(NH + 2·KVH)·hs).
void unfused_attention_forward(Tensor out, Tensor att, Tensor qkv, int B, int T, int NH, int KVH,
                               int hs);
// dqkv (B,T,(NH + 2·KVH)·hs) =; datt (B,NH,T,T) is scratch; dout (B,T,NH·hs).
void unfused_attention_backward_input(Tensor dqkv, Tensor datt, Tensor dout, Tensor qkv, Tensor att,
                                      int B, int T, int NH, int KVH, int hs);

}  // namespace mpf::test
