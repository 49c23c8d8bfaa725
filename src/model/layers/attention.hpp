// Causal self-attention on a packed qkv, per query head h: S = Q_h·K_kvᵀ/√hs, P = softmax over
// the causal prefix, out = P·V_kv. Rows of qkv are [Q (NH heads) | K (KVH heads) | V (KVH heads)],
// head size hs. With KVH = NH this is GPT-2's multi-head attention on llm.c's (B,T,3C); with fewer
// KV heads it is grouped-query attention (Ainslie et al. 2023; Llama, Qwen2, Mistral): query head
// h reads KV head h / (NH/KVH). The per-head products go to the backend's batched GEMM straight
// from the packed layout (row stride (NH + 2·KVH)·hs), so nothing is permuted and no K or V is
// copied per query head. Attention has no parameters: its whole backward is an input gradient.
#pragma once

#include "core/types.hpp"

namespace mpf {

// out (B,T,NH·hs); att (B,NH,T,T) keeps P for backward (zero above the diagonal);
// qkv (B,T,(NH + 2·KVH)·hs). KVH divides NH.
void attention_forward(Tensor out, Tensor att, Tensor qkv, int B, int T, int NH, int KVH, int hs);

// dqkv (B,T,(NH + 2·KVH)·hs) =; datt (B,NH,T,T) is scratch; dout (B,T,NH·hs); qkv and att as saved
// by forward. A KV head's dK and dV are the sums over its group's query heads, in ascending h.
void attention_backward_input(Tensor dqkv, Tensor datt, Tensor dout, Tensor qkv, Tensor att, int B,
                              int T, int NH, int KVH, int hs);

// GPT-2's multi-head attention: qkv (B,T,3C), out (B,T,C), C = NH·hs; the above with KVH = NH.
void attention_forward(Tensor out, Tensor att, Tensor qkv, int B, int T, int C, int NH);
void attention_backward_input(Tensor dqkv, Tensor datt, Tensor dout, Tensor qkv, Tensor att, int B,
                              int T, int C, int NH);

// The KV-cache decoder's attention: out (n, NH·hs) = causal attention of n new positions
// [pos, pos + n) over the P = pos + n positions held in a cache. q: the new rows' queries, NH
// heads side by side in rows of stride ldq (a packed qkv's rows, whose Q comes first); keys and
// values (P rows of stride ldkv, at least KVH·hs): KVH heads side by side; query head h reads KV
// head h / (NH/KVH). Row i of a head sees positions 0..pos + i. scores (NH, n, P) is scratch.
// Products in fp32 whatever the calling thread's precision.
void attention_over_cache_forward(Tensor out, Tensor scores, Tensor q, int ldq, Tensor keys,
                                  Tensor values, int ldkv, int n, int pos, int NH, int KVH, int hs);

}  // namespace mpf
