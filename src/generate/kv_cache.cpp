#include "generate/kv_cache.hpp"

#include <cmath>

#include "core/parallel.hpp"
#include "model/layers/attention.hpp"

namespace mpf {

namespace {

// A rank's MLA sizes: its heads H, the head parts, the latent rank, a cached row's width W.
struct LatentDims {
  int64_t H, dn, dr, dv, hs, kvr, W;
  explicit LatentDims(const TpShard& s)
      : H(s.heads),
        dn(s.cfg.qk_nope_dim),
        dr(s.cfg.qk_rope_dim),
        dv(s.cfg.v_head_dim),
        hs(s.cfg.qk_nope_dim + s.cfg.qk_rope_dim),
        kvr(s.cfg.kv_lora_rank),
        W(s.cfg.kv_lora_rank + s.cfg.qk_rope_dim) {}
};

// Query heads one call of the fused kernel takes over the latent's one kv head: all, unless their
// rows pass 8,192 floats (a team's scratch on a GPU holds a tile of every head of a call); then
// the largest divisor of H under that.
int64_t latent_group(int64_t H, int64_t W) {
  int64_t g = H;
  while (g > 1 && (g * W > 8192 || H % g != 0)) --g;
  return g;
}

}  // namespace

KVCache KVCache::allocate(const TpShard& shard, int capacity) {
  KVCache c;
  c.layers = shard.cfg.layers;
  c.capacity = capacity;
  c.latent = shard.cfg.mla();
  c.width = c.latent ? shard.cfg.kv_lora_rank + shard.cfg.qk_rope_dim : shard.kv;
  c.q_width = c.latent ? shard.heads * shard.cfg.head_size() : shard.attn;
  c.slab = Slab("mpf::kv_cache", (c.latent ? 1 : 2) * int64_t(c.layers) * capacity * c.width);
  return c;
}

Tensor KVCache::keys(int l) const {
  const int64_t n = int64_t(capacity) * width;
  return Tensor(slab.data() + l * n, n);
}

Tensor KVCache::values(int l) const {
  if (latent) return Tensor();
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

void mla_cache_store(const KVCache& cache, int l, Tensor latent, Tensor qkv, int n, int pos,
                     const TpShard& s) {
  const LatentDims d(s);
  const Tensor rows = cache.keys(l);
  const int64_t W = d.W, kvr = d.kvr, dn = d.dn, Q = d.H * d.hs;
  const float *lat = latent.data(), *q = qkv.data();
  for_each_2d(
      "mpf::mla_cache_store", n, int(W), KOKKOS_LAMBDA(int64_t i, int c) {
        // The rotary key is the same in every head's K: head 0's.
        rows((pos + i) * W + c) = c < kvr ? lat[i * kvr + c] : q[i * 3 * Q + Q + dn + (c - kvr)];
      });
}

int64_t mla_cached_attention_scratch_floats(const TpShard& s, int64_t n) {
  const LatentDims d(s);
  return 2 * n * d.H * d.W;
}

void mla_cached_attention_forward(Tensor out, Tensor lse, Tensor scratch, Tensor qkv, Tensor kvbw,
                                  const KVCache& cache, int l, int n, int pos, const TpShard& s) {
  const LatentDims d(s);
  if (pos == 0) {
    // A prompt from the start: its keys are its own rows, whose K and V per head mla_forward
    // formed already. The training attention over them costs fewer products than the absorbed
    // form's hs + kv_lora_rank + qk_rope a pair (and gives its bits).
    attention_forward(out, lse,
                      packed_attention(qkv, 1, int(d.H), int(d.H), int(d.hs),
                                       PositionRuns::contiguous(n), nullptr, s.cfg.sliding_window));
    return;
  }
  const int64_t H = d.H, W = d.W, kvr = d.kvr, dn = d.dn, dv = d.dv, hs = d.hs, Q = H * hs;
  const int64_t G = latent_group(H, W);
  float* qa = scratch.data();  // (H/G, n, G·W): the absorbed queries [q̃ | q_rope]
  float* oa = scratch.data() + int64_t(n) * H * W;  // the same shape: [P·c_kv | P·k_rope]
  const float *q = qkv.data(), *wkv = kvbw.data();
  // The kernel scales by 1/√W; the model's scores by 1/√hs.
  const float rescale = float(std::sqrt(double(W) / double(hs)));
  // q̃ = q_nope·W_UK_h, and q_rope as it is; group-major so each call's queries are one matrix.
  for_each(
      "mpf::mla_absorb_queries", int64_t(n) * H * W, KOKKOS_LAMBDA(int64_t e) {
        const int64_t i = e / (H * W), h = (e / W) % H, c = e % W;
        const float* qh = q + i * 3 * Q + h * hs;
        float v;
        if (c < kvr) {
          const float* wk = wkv + h * (dn + dv) * kvr + c;  // W_UK_h's column c, stride kvr
          v = 0.0f;
          for (int64_t j = 0; j < dn; ++j) v += qh[j] * wk[j * kvr];
        } else {
          v = qh[dn + (c - kvr)];
        }
        qa[((h / G) * n + i) * G * W + (h % G) * W + c] = v * rescale;
      });
  for (int64_t g = 0; g < H / G; ++g) {
    AttentionInputs x;
    x.NH = int(G);
    x.KVH = 1;
    x.hs = int(W);
    x.q = qa + g * n * G * W;
    x.ldq = G * W;
    x.queries = PositionRuns::contiguous(n, pos);
    x.k = x.v = cache.keys(l).data();
    x.ldkv = W;
    x.keys = PositionRuns::contiguous(pos + n);
    x.window = s.cfg.sliding_window;
    attention_forward(Tensor(oa + g * n * G * W, int64_t(n) * G * W),
                      Tensor(lse.data() + g * G * n, G * int64_t(n)), x);
  }
  // o_h = (P·c_kv)·W_UV_hᵀ into each head's first v_head columns, zeros past them.
  float* o = out.data();
  for_each(
      "mpf::mla_absorb_values", int64_t(n) * H * hs, KOKKOS_LAMBDA(int64_t e) {
        const int64_t i = e / (H * hs), h = (e / hs) % H, j = e % hs;
        float v = 0.0f;
        if (j < dv) {
          const float* lat = oa + ((h / G) * n + i) * G * W + (h % G) * W;
          const float* wv = wkv + (h * (dn + dv) + dn + j) * kvr;
          for (int64_t c = 0; c < kvr; ++c) v += wv[c] * lat[c];
        }
        o[i * Q + h * hs + j] = v;
      });
}

}  // namespace mpf
