// The keys and values every position of one sequence produced, per block, for this rank's heads,
// and the attention of new positions over them: what makes a generated token cost one position
// of the model instead of the whole prefix.
//
// Block l keeps K and V as two (capacity, Ck) row-major matrices (Ck = this rank's kv heads side
// by side, head h in columns h·hs..(h+1)·hs: C/T for GPT-2, fewer under grouped-query attention),
// so a head's keys are a strided matrix the backend's batched GEMM reads in place, as the training
// attention reads the packed qkv.
#pragma once

#include "core/types.hpp"
#include "model/shard.hpp"

namespace mpf {

struct KVCache {
  int layers = 0;    // blocks of the model
  int capacity = 0;  // positions it can hold
  int width = 0;     // Ck: this rank's kv heads' width
  int q_width = 0;   // Ca: this rank's query heads' width (the packed qkv rows are Ca + 2 Ck)
  Slab slab;         // K of every block, then V of every block

  static KVCache allocate(const TpShard& shard, int capacity);
  Tensor keys(int l) const;    // (capacity, Ck)
  Tensor values(int l) const;  // (capacity, Ck)
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

}  // namespace mpf
