#include "generate/kv_cache.hpp"

#include <cmath>

#include "backends/gemm.hpp"
#include "core/parallel.hpp"
#include "core/vector_math.hpp"

namespace mpf {

using backend::Op;

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

void cached_attention_forward(Tensor out, Tensor scores, Tensor qkv, const KVCache& cache, int l,
                              int n, int pos, int NHl) {
  const int Ca = cache.q_width, Ck = cache.width, hs = Ca / NHl, P = pos + n;  // P: attended over
  const int W = Ca + 2 * Ck, group = Ca / Ck;  // query heads per kv head
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int64_t per_head = int64_t(n) * P;
  // S_h (n,P) = scale · Q_h · K_gᵀ for every head h, g its kv head: GPT-2's heads (g = h) in one
  // batch, grouped-query heads one by one (several read the same keys).
  if (group == 1) {
    backend::gemm_strided_batched(Op::N, Op::T, n, P, hs, scale, qkv.data(), W, hs,
                                  cache.keys(l).data(), Ck, hs, 0.0f, scores.data(), P, per_head,
                                  NHl);
  } else {
    for (int h = 0; h < NHl; ++h) {
      backend::gemm_strided_batched(Op::N, Op::T, n, P, hs, scale, qkv.data() + h * hs, W, hs,
                                    cache.keys(l).data() + (h / group) * hs, Ck, hs, 0.0f,
                                    scores.data() + h * per_head, P, per_head, 1);
    }
  }
  // Row i of a head is position pos + i: it sees positions 0..pos + i.
  for_rows(
      "mpf::cached_attention_softmax", int64_t(NHl) * n, P,
      KOKKOS_LAMBDA(const Row& r, int64_t row) {
        const int seen = pos + int(row % n) + 1;
        float* p = scores.data() + row * P;
        const float mx = r.max(seen, [p](int j) { return p[j]; });
        r.for_each(seen, [=](int j) { p[j] = vmath::exp(p[j] - mx); });
        const float inv = 1.0f / r.sum(seen, [p](int j) { return p[j]; });
        r.for_each(seen, [=](int j) { p[j] *= inv; });
        r.for_each(P - seen, [=](int j) { p[seen + j] = 0.0f; });
      });
  // out_h (n,hs) = P_h · V_g, into columns h·hs.. of out (n,Ca)
  if (group == 1) {
    backend::gemm_strided_batched(Op::N, Op::N, n, hs, P, 1.0f, scores.data(), P, per_head,
                                  cache.values(l).data(), Ck, hs, 0.0f, out.data(), Ca, hs, NHl);
    return;
  }
  for (int h = 0; h < NHl; ++h) {
    backend::gemm_strided_batched(Op::N, Op::N, n, hs, P, 1.0f, scores.data() + h * per_head, P,
                                  per_head, cache.values(l).data() + (h / group) * hs, Ck, hs, 0.0f,
                                  out.data() + h * hs, Ca, hs, 1);
  }
}

}  // namespace mpf
