// Attention a chunk of queries at a time through the backend's GEMM (backends/gemm.hpp), beside
// the fused kernel (attention.hpp), with its API and results: the same AttentionInputs (grouped-
// query heads, strided q/k/v, position runs, document masks, a sliding window), the same out and
// lse (merge for ring attention's blocks; a row that sees no key gets out 0 and lse −∞), the same
// gradients and accumulate flags, so either can run any attention call.
//
// Per sequence and chunk of Tc query rows (a chunk never spans two runs of positions), over only
// the key rows some query of the chunk sees (the causal mask, the window and the documents cut
// the rest off; the span widened to multiples of 64 keys, a bounded set of product shapes),
// every head at once:
//   forward   S = Q_c·Kᵀ (GEMM); a row kernel masks and scales S and writes e^(S − max) in place
//             (P before its normalisation) and each row's logsumexp; out = that·V (GEMM), divided
//             by the row's sum (hs columns, not the keys') and merged by the logsumexps under
//             merge;
//   backward  S = Q_c·Kᵀ and dP = dO_c·Vᵀ (GEMMs); a row kernel recomputes P from the saved lse
//             and writes dS = P⊙(dP − delta)/√hs; dQ_c = dS·K, dK += dSᵀ·Q_c, dV += Pᵀ·dO_c
//             (GEMMs).
// The GEMMs are batched over the kv heads, one call per query head of a group. Every sum has a
// fixed order (chunks in order, then the group's heads in order; no atomics), so the bits do
// not depend on timing. S and dP, (NH, Tc, visible keys), are the only large scratch: kept
// between calls and grown when a call needs more.
//
// Precision: the products go through matmul.hpp, so under Bf16Products their operands (Q, K, V,
// dO, P and dS) are rounded to bf16 and the products accumulate in fp32; the softmax and the
// merges stay fp32.
#pragma once

#include <cstdint>

#include "core/types.hpp"
#include "model/layers/attention.hpp"

namespace mpf {

// Query rows per chunk unless a call asks for another.
constexpr int kChunkedAttentionRows = 128;

// As attention_forward (attention.hpp); chunk_rows: Tc.
void chunked_attention_forward(Tensor out, Tensor lse, const AttentionInputs& x, bool merge = false,
                               int chunk_rows = kChunkedAttentionRows);

// As attention_backward (attention.hpp); delta from attention_backward_delta.
void chunked_attention_backward(float* dq, int64_t lddq, bool accumulate_dq, float* dk, float* dv,
                                int64_t lddkv, bool accumulate_dkv, Tensor dout, Tensor lse,
                                Tensor delta, const AttentionInputs& x,
                                int chunk_rows = kChunkedAttentionRows);

// The scratch a call with NH query heads of size hs over key_rows keys per sequence keeps (the
// backward's, the larger), for the memory plan.
int64_t chunked_attention_scratch_bytes(int NH, int hs, int key_rows,
                                        int chunk_rows = kChunkedAttentionRows);

// The bf16 copies of a call's inputs a Bf16Products scope keeps (HeldOperand) for `rows` query
// rows: the packed QKV, dO and, for ring attention's blocks (K and V apart from Q), their K and V.
int64_t chunked_attention_bf16_bytes(int NH, int KVH, int hs, int64_t rows, bool ring);

}  // namespace mpf
