// The keys and values every position of one sequence produced, per block, for this rank's heads,
// and the attention of new positions over them: what makes a generated token cost one position
// of the model instead of the whole prefix.
//
// Block l keeps K and V as two (capacity, Ck) row-major matrices (Ck = this rank's kv heads side
// by side, head h in columns h·hs..(h+1)·hs: C/T for GPT-2, fewer under grouped-query attention),
// so a head's keys are a strided matrix the backend's batched GEMM reads in place, as the training
// attention reads the packed qkv.
//
// Multi-head latent attention (deepseek_v3) caches instead, per token, the one row
// [c_kv | k_rope] its heads share: the normalised latent (kv_lora_rank values, after
// kv_a_layernorm) and the rotated rotary key (qk_rope values), one (capacity, kv_lora_rank +
// qk_rope) matrix a block, and a new token attends in the absorbed form
// (mla_cached_attention_forward). Every TP rank holds the whole latent (it is replicated; only
// the heads are split).
#pragma once

#include "core/types.hpp"
#include "model/shard.hpp"

namespace mpf {

struct KVCache {
  int layers = 0;       // blocks of the model
  int capacity = 0;     // positions it can hold
  int width = 0;        // Ck: this rank's kv heads' width; latent: kv_lora_rank + qk_rope
  int q_width = 0;      // Ca: this rank's query heads' width (the packed qkv rows are Ca + 2 Ck)
  bool latent = false;  // MLA's [c_kv | k_rope] rows, no V
  Slab slab;            // K of every block, then V of every block (latent: the rows of each)

  static KVCache allocate(const TpShard& shard, int capacity);
  Tensor keys(int l) const;    // (capacity, Ck); latent: block l's [c_kv | k_rope] rows
  Tensor values(int l) const;  // (capacity, Ck); latent: none
  // Floats one token adds to one block's cache on this rank: 2·Ck, or kv_lora_rank + qk_rope.
  int64_t floats_per_token_layer() const { return latent ? width : 2 * int64_t(width); }
};

// Block l's cache takes the keys and values of n new positions [pos, pos + n) from their packed
// qkv (n, Ca + 2Ck) = [Q | K | V] (rotated, for Llama).
void kv_cache_store(const KVCache& cache, int l, Tensor qkv, int n, int pos);

// out (n,Ca) = causal attention of n new positions [pos, pos + n), whose queries are in qkv
// (n,Ca+2Ck), over block l's cached positions [0, pos + n) (stored first by kv_cache_store): per
// head, S = Q·Kᵀ/√hs, P = softmax over positions <= the query's own, out = P·V, query head h
// reading kv head h / (NHl / KVHl). lse (NHl, n) is scratch. NHl = this rank's heads. It is the
// training attention's fused kernel (model/layers/attention.hpp) over the cache's kv heads;
// window > 0: a query sees only the last `window` positions (the model's sliding window).
void cached_attention_forward(Tensor out, Tensor lse, Tensor qkv, const KVCache& cache, int l,
                              int n, int pos, int NHl, int window);

// MLA: block l's cache takes the rows [c_kv | k_rope] of n new positions [pos, pos + n): the
// normalised latent `latent` (n, kv_lora_rank) and the rotary key, rotated, from head 0's K in the
// packed qkv (n, 3·NHl·hs) mla_forward wrote.
void mla_cache_store(const KVCache& cache, int l, Tensor latent, Tensor qkv, int n, int pos,
                     const TpShard& s);

// Floats of mla_cached_attention_forward's scratch for n rows.
int64_t mla_cached_attention_scratch_floats(const TpShard& s, int64_t n);

// MLA's attention in the absorbed form, out (n, NHl·hs) (each head's first v_head values; the
// rest 0) for the n new positions' queries in qkv, over block l's cached rows [0, pos + n): per
// head h, q̃ = q_nope·W_UK_h (the latent's query; W_UK_h the K rows of head h in kvbw, (kv_lora_rank
// columns), scores (q̃·c_kv + q_rope·k_rope)/√(qk_nope + qk_rope) (the queries carry YaRN's
// scale already), P = softmax, o = (P·c_kv)·W_UV_hᵀ (W_UV_h its V rows). The scores and P·c_kv
// are the fused attention kernel's over the cache as one kv head of kv_lora_rank + qk_rope
// values (P·k_rope, computed alongside, is not read). lse (NHl, n) and scratch are scratch.
// At pos 0 (a prompt from the start) it is instead the training attention over the rows' own
// per-head K and V in qkv: the same result with fewer products.
void mla_cached_attention_forward(Tensor out, Tensor lse, Tensor scratch, Tensor qkv, Tensor kvbw,
                                  const KVCache& cache, int l, int n, int pos, const TpShard& s);

}  // namespace mpf
