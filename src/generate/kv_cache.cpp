#include "generate/kv_cache.hpp"

#include "core/parallel.hpp"
#include "model/layers/attention.hpp"

namespace mpf {

KVCache KVCache::allocate(const TpShard& shard, int capacity) {
  KVCache c;
  c.layers = shard.cfg.layers;
  c.capacity = capacity;
  c.width = shard.attn;
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
  const int Ca = cache.width;
  for_each_2d(
      "mpf::kv_cache_store", n, Ca, KOKKOS_LAMBDA(int64_t i, int c) {
        const float* src = qkv.data() + i * 3 * Ca;
        const int64_t row = (pos + i) * Ca;
        k(row + c) = src[Ca + c];
        v(row + c) = src[2 * Ca + c];
      });
}

void cached_attention_forward(Tensor out, Tensor scores, Tensor qkv, const KVCache& cache, int l,
                              int n, int pos, int NHl) {
  const int Ca = cache.width;
  attention_over_cache_forward(out, scores, qkv, 3 * Ca, cache.keys(l), cache.values(l), Ca, n, pos,
                               NHl, NHl, Ca / NHl);
}

}  // namespace mpf
