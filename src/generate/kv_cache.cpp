#include "generate/kv_cache.hpp"

#include "core/parallel.hpp"
#include "model/layers/attention.hpp"

namespace mpf {

KVCache KVCache::allocate(const TpShard& shard, int capacity) {
  KVCache c;
  c.layers = shard.cfg.layers;
  c.capacity = capacity;
  c.width = shard.kv;
  c.q_width = shard.attn;
  c.slab = Slab("mpf::kv_cache", 2 * int64_t(c.layers) * capacity * c.width);
  return c;
}

Tensor KVCache::keys(int l) const {
  const int64_t n = int64_t(capacity) * width;
  return Tensor(slab.data() + l * n, n);
}

Tensor KVCache::values(int l) const {
  const int64_t n = int64_t(capacity) * width;
  return Tensor(slab.data() + (layers + l) * n, n);
}

void kv_cache_store(const KVCache& cache, int l, Tensor qkv, int n, int pos) {
  const Tensor k = cache.keys(l), v = cache.values(l);
  const int Ck = cache.width, Ca = cache.q_width;
  for_each_2d(
      "mpf::kv_cache_store", n, Ck, KOKKOS_LAMBDA(int64_t i, int c) {
        const float* src = qkv.data() + i * (Ca + 2 * Ck);
        const int64_t row = (pos + i) * Ck;
        k(row + c) = src[Ca + c];
        v(row + c) = src[Ca + Ck + c];
      });
}

void cached_attention_forward(Tensor out, Tensor lse, Tensor qkv, const KVCache& cache, int l,
                              int n, int pos, int NHl, int window) {
  const int Ca = cache.q_width, Ck = cache.width, hs = Ca / NHl;
  // The training attention's kernel, its queries at positions [pos, pos + n) and its keys the
  // cache's positions [0, pos + n).
  AttentionInputs x;
  x.NH = NHl;
  x.KVH = Ck / hs;
  x.hs = hs;
  x.q = qkv.data();
  x.ldq = Ca + 2 * Ck;
  x.queries = PositionRuns::contiguous(n, pos);
  x.k = cache.keys(l).data();
  x.v = cache.values(l).data();
  x.ldkv = Ck;
  x.keys = PositionRuns::contiguous(pos + n);
  x.window = window;
  attention_forward(out, lse, x);
}

}  // namespace mpf
