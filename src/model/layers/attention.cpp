#include "model/layers/attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "backends/tile_gemm.hpp"
#include "core/bf16.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/vector_math.hpp"
#include "model/layers/attention_masks.hpp"
#include "model/layers/matmul.hpp"

namespace mpf {

namespace {

// The masks and tiles the chunked path shares (attention_masks.hpp).
using attn::exp_or_zero;
using attn::first_key;
using attn::kNegInf;
using attn::merge_weights;
using attn::Merged;
using attn::sees;
using attn::Tile;
using attn::tile_at;
using attn::tile_count;

// ---- tiles and masks, shared by both shapes -----------------------------------------------------

// How much of a key tile a query tile sees, its rows' first keys (first_key) within
// [doc_lo, doc_hi].
enum class Cover { kNone, kPart, kAll };
KOKKOS_INLINE_FUNCTION Cover cover(const Tile& q, int doc_lo, int doc_hi, const Tile& k) {
  const int q_last = q.pos + q.n - 1, k_last = k.pos + k.n - 1;
  if (k.pos > q_last || k_last < doc_lo) return Cover::kNone;
  if (k_last <= q.pos && k.pos >= doc_hi) return Cover::kAll;
  return Cover::kPart;
}

KOKKOS_INLINE_FUNCTION float round_if(bool bf16, float x) {
  return bf16 ? from_bf16(to_bf16(x)) : x;
}

// The smallest and largest first key (first_key) among a tile's rows (0, 0 without document
// masking or a window: positions are never negative, so every key then passes the test).
struct DocRange {
  int lo = 0, hi = 0;
};
DocRange doc_range_host(const int32_t* doc, const Tile& t, int window) {
  if (!doc && window == 0) return {};
  const int f0 = first_key(doc, t.row, t.pos, window);
  DocRange r{f0, f0};
  for (int i = 1; i < t.n; ++i) {
    const int f = first_key(doc, t.row + i, t.pos + i, window);
    r.lo = std::min(r.lo, f);
    r.hi = std::max(r.hi, f);
  }
  return r;
}

int round_up(int x, int m) {
  return (x + m - 1) / m * m;
}

// ---- the host shape -----------------------------------------------------------------------------
// A unit per host thread, taken dynamically (core/parallel.hpp: each unit's result is independent
// of which thread runs it). Tiles are packed into the thread's scratch, zero-padded to the
// micro-kernel's multiples: rows to kTileRows, the head size to kTileCols (hp).

constexpr int kHostTile = 64;  // queries and keys per tile: a tile's operands fit in L2
static_assert(kHostTile % vmath::kLanes == 0, "the softmax takes rows in whole vectors");

// Floats of each kernel's per-thread scratch (G heads a unit, head size padded to hp), as the
// kernels carve it.
int64_t host_forward_floats(int64_t G, int64_t hp) {
  const int64_t T = kHostTile;
  return 2 * G * T * hp + 2 * G * T + 2 * hp * T + T * T;  // Q, O; max, sum; Kᵀ, V; S
}
int64_t host_kv_floats(int64_t hp) {
  const int64_t T = kHostTile;
  return 6 * T * hp + 2 * T * T;  // Kᵀ, Vᵀ, dK, dV, Q, dO; S, dP
}
int64_t host_q_floats(int64_t G, int64_t hp) {
  const int64_t T = kHostTile;
  return 3 * G * T * hp + 3 * T * hp + 2 * T * T;  // Q, dO, dQ; Kᵀ, Vᵀ, K; S, dP
}

// Grows v to n values, freeing the old ones first: their contents are not needed, and a copy would
// hold both at once (a peak the memory plan does not count).
template <class T>
void grow_without_copy(std::vector<T>& v, int64_t n) {
  if (v.size() >= size_t(n)) return;
  std::vector<T>().swap(v);
  v.resize(size_t(n));
}

// Per host thread scratch, grown when a call needs more and kept.
template <class T>
class HostScratch {
 public:
  // Room for `n` values on each host thread.
  void reserve(size_t n) {
    const size_t threads = size_t(host_thread_count());
    if (buffers_.size() < threads) buffers_.resize(threads);
    for (std::vector<T>& b : buffers_) {
      if (b.size() < n) b.assign(n, T{});
    }
  }
  T* of(int thread) { return buffers_[size_t(thread)].data(); }

 private:
  std::vector<std::vector<T>> buffers_;
};
HostScratch<float>& host_buffers() {
  static HostScratch<float> scratch;
  return scratch;
}
// In bf16, the products' operands packed in pairs (backends/tile_gemm.hpp's tile_gemm_bf16), at
// most as many as the kernel's floats.
using backend::Bf16Pair;
HostScratch<Bf16Pair>& host_pairs() {
  static HostScratch<Bf16Pair> scratch;
  return scratch;
}
// In bf16, a call's K and V (and in the backward Q and dO) packed once, a tile at a time in each
// layout a product reads them in, for every tile pair that reads them: packed per tile pair they
// cost as much as the products (docs/performance.md). Kept between calls, grown when a call needs
// more (attention_bf16_bytes).
Bf16Pair* call_pairs(int64_t n) {
  static std::vector<Bf16Pair> pairs;
  grow_without_copy(pairs, n);
  return pairs.data();
}

// The backward's dS, kept by the dK/dV pass for the dQ pass, which then does one product a tile
// pair where it did three and a softmax (the same bits: the same products of the same operands). A
// tile pair's dS is kept as the dQ product reads it: in bf16 packed in pairs along the keys (and
// rounded as it is packed), in fp32 as the tile's rows. At most kStoredScoresBytes at a time: the
// (sequence, kv head) groups are taken in slices that fit, and where one group's does not (long
// sequences) the dQ pass computes dS again.
constexpr int64_t kStoredScoresBytes = int64_t(128) << 20;
int64_t g_stored_scores_bytes = kStoredScoresBytes;  // set_attention_stored_scores
// 4-byte words a tile pair's dS takes: bf16 pairs, or floats.
constexpr int64_t score_tile_words(bool bf16) {
  return int64_t(kHostTile) * kHostTile / (bf16 ? 2 : 1);
}

struct StoredScores {
  // slot[(b·nqt + qi)·nkt + kj]: the pair's place among sequence b's visible tile pairs (in
  // query-tile order), or −1.
  std::vector<int32_t> slot;
  std::vector<int64_t> visible;  // per sequence
  int64_t words = 0;             // score_tile_words
  // The current slice: the groups [first, first + count), and where each one's tiles begin
  // (base) and how many pairs a head of it keeps (per_head); its pairs are those from slot
  // `pair_base` on (a slice of one group's query tiles starts past 0).
  int64_t first = 0, count = 0, pair_base = 0;
  std::vector<int64_t> base, per_head;
  Bf16Pair* pairs = nullptr;  // bf16
  float* floats = nullptr;    // fp32

  int64_t offset(int b, int kvh, int KVH, int g, int qi, int kj, int nqt, int nkt) const {
    const size_t group = size_t(int64_t(b) * KVH + kvh - first);
    const int64_t pair = slot[size_t((int64_t(b) * nqt + qi) * nkt + kj)] - pair_base;
    return base[group] + (int64_t(g) * per_head[group] + pair) * words;
  }
};

// What a call of the backward's passes covers: the groups (sequence, kv head) [first, first +
// groups), their query tiles [qa, qb), and with dS kept, the store. Where a group's query tiles
// are taken in ranges, `dkv` holds each key tile's dK and dV (2 tiles of floats a key tile)
// between the ranges, so each is summed over the query tiles in one order as without ranges.
struct BackwardSlice {
  int64_t first = 0, groups = 0;
  int qa = 0, qb = 0;
  const StoredScores* store = nullptr;
  float* dkv = nullptr;
};

// The store's memory, kept between calls and grown when a call needs more.
template <class T>
T* stored_score_tiles(int64_t n) {
  static std::vector<T> tiles;
  grow_without_copy(tiles, n);
  return tiles.data();
}

// Under query ranges, every key tile's dK and dV of the group in hand (BackwardSlice::dkv).
float* key_tile_gradients(int64_t n) {
  static std::vector<float> dkv;
  grow_without_copy(dkv, n);
  return dkv.data();
}

struct HostShape {
  const AttentionInputs& x;
  int G, hp, nqt, nkt;
  int kp, hh;  // bf16: pairs of the head size; pairs of a packed row (hp / 2)
  float scale;
  bool bf16;

  explicit HostShape(const AttentionInputs& in, bool bf16_products)
      : x(in),
        G(in.NH / in.KVH),
        hp(round_up(in.hs, backend::kTileCols)),
        nqt(tile_count(in.queries, kHostTile)),
        nkt(tile_count(in.keys, kHostTile)),
        kp((in.hs + 1) / 2),
        hh(hp / 2),
        scale(1.0f / std::sqrt(float(in.hs))),
        bf16(bf16_products) {}

  const float* q_row(int b, int row, int h) const {
    return x.q + (int64_t(b) * x.queries.rows + row) * x.ldq + int64_t(h) * x.hs;
  }
  int64_t kv_offset(int b, int row, int kvh) const {
    return (int64_t(b) * x.keys.rows + row) * x.ldkv + int64_t(kvh) * x.hs;
  }
  const int32_t* docs(int b) const {
    return x.doc_start ? x.doc_start + int64_t(b) * x.queries.rows : nullptr;
  }

  // bf16, the call's packed tiles (call_pairs): a tile takes tile_pairs() in any layout; key
  // tiles are numbered per (sequence, kv head), query tiles per (sequence, head).
  int64_t tile_pairs() const { return int64_t(kHostTile) * hh; }
  int64_t key_tiles() const { return int64_t(x.B) * x.KVH * nkt; }
  int64_t query_tiles() const { return int64_t(x.B) * x.NH * nqt; }
  int64_t key_tile(int b, int kvh, int kt) const { return (int64_t(b) * x.KVH + kvh) * nkt + kt; }
  int64_t query_tile(int b, int head, int qt) const {
    return (int64_t(b) * x.NH + head) * nqt + qt;
  }

  // dst (kHostTile, hp) = rows [t.row, t.row + t.n) of `src` (row stride ld), zero-padded.
  void pack_rows(float* dst, const float* src, int64_t ld, int n) const {
    for (int r = 0; r < kHostTile; ++r) {
      float* d = dst + int64_t(r) * hp;
      if (r < n) {
        const float* s = src + r * ld;
        for (int c = 0; c < x.hs; ++c) d[c] = round_if(bf16, s[c]);
        for (int c = x.hs; c < hp; ++c) d[c] = 0.0f;
      } else {
        for (int c = 0; c < hp; ++c) d[c] = 0.0f;
      }
    }
  }
  // dst (hs, kHostTile) = the transpose of n rows of src, zero-padded past n.
  void pack_transposed(float* dst, const float* src, int64_t ld, int n) const {
    for (int d = 0; d < x.hs; ++d) {
      float* o = dst + int64_t(d) * kHostTile;
      for (int c = 0; c < n; ++c) o[c] = round_if(bf16, src[c * ld + d]);
      for (int c = n; c < kHostTile; ++c) o[c] = 0.0f;
    }
  }
  // bf16 (backends/tile_gemm.hpp's pairs): n rows as pairs along the head size, an A operand
  // (kHostTile rows of hh pairs, zero-padded); and transposed, Xᵀ as a B operand (kp rows of
  // kHostTile pairs); and as pairs of rows, X as a B operand (pairs rows of hp pairs).
  void pack_pair_rows(Bf16Pair* dst, const float* src, int64_t ld, int n) const {
    backend::pack_bf16_pairs(dst, hh, src, ld, n, x.hs, kHostTile, hh);
  }
  void pack_pair_transposed(Bf16Pair* dst, const float* src, int64_t ld, int n) const {
    backend::pack_bf16_pairs_transposed(dst, kHostTile, src, ld, n, x.hs, kHostTile, kp);
  }
  void pack_row_pairs(Bf16Pair* dst, const float* src, int64_t ld, int n) const {
    backend::pack_bf16_column_pairs(dst, hp, src, ld, n, x.hs, (n + 1) / 2, hp);
  }

  // S (rows, kHostTile): −∞ where the query at row r of `qt` does not see key column c of `kt`.
  void mask(float* S, int rows, const Tile& qt, const int32_t* doc, const Tile& kt, Cover c) const {
    for (int r = 0; r < rows; ++r) {
      float* s = S + r * kHostTile;
      if (c == Cover::kPart) {
        const int qpos = qt.pos + r, first = first_key(doc, qt.row + r, qpos, x.window);
        for (int j = 0; j < kt.n; ++j) {
          if (!sees(qpos, first, kt.pos + j)) s[j] = kNegInf;
        }
      }
      for (int j = kt.n; j < kHostTile; ++j) s[j] = kNegInf;
    }
  }
};

// bf16, once a call: every key tile's K and V (HostShape::key_tile i at dst + i·per·tile_pairs)
// in the layouts the products read, the forward's Kᵀ and V (pairs of rows), or the backward's Kᵀ,
// Vᵀ and K (pairs of rows).
void pack_key_tiles(const HostShape& h, Bf16Pair* dst, bool backward) {
  const int64_t tp = h.tile_pairs(), per = backward ? 3 : 2;
  for_each_unit_on_host("mpf::attention_pack_keys", h.key_tiles(), [&](int64_t i, int) {
    const int64_t bk = i / h.nkt;
    const int b = int(bk / h.x.KVH), kvh = int(bk % h.x.KVH);
    const Tile kt = tile_at(h.x.keys, kHostTile, int(i % h.nkt));
    const int64_t at = h.kv_offset(b, kt.row, kvh);
    Bf16Pair* d = dst + i * per * tp;
    h.pack_pair_transposed(d, h.x.k + at, h.x.ldkv, kt.n);
    if (backward) {
      h.pack_pair_transposed(d + tp, h.x.v + at, h.x.ldkv, kt.n);
      h.pack_row_pairs(d + 2 * tp, h.x.k + at, h.x.ldkv, kt.n);
    } else {
      h.pack_row_pairs(d + tp, h.x.v + at, h.x.ldkv, kt.n);
    }
  });
}

// bf16, once a backward: every query tile's Q and dO (HostShape::query_tile i at dst +
// 4·i·tile_pairs) as A operands (pairs along the head size), then as B operands (pairs of rows).
void pack_query_tiles(const HostShape& h, Bf16Pair* dst, const float* dout) {
  const int64_t tp = h.tile_pairs(), ldo = int64_t(h.x.NH) * h.x.hs;
  for_each_unit_on_host("mpf::attention_pack_queries", h.query_tiles(), [&](int64_t i, int) {
    const int64_t bh = i / h.nqt;
    const int b = int(bh / h.x.NH), head = int(bh % h.x.NH);
    const Tile qt = tile_at(h.x.queries, kHostTile, int(i % h.nqt));
    const float* q = h.q_row(b, qt.row, head);
    const float* dy =
        dout + (int64_t(b) * h.x.queries.rows + qt.row) * ldo + int64_t(head) * h.x.hs;
    Bf16Pair* d = dst + i * 4 * tp;
    h.pack_pair_rows(d, q, h.x.ldq, qt.n);
    h.pack_pair_rows(d + tp, dy, ldo, qt.n);
    h.pack_row_pairs(d + 2 * tp, q, h.x.ldq, qt.n);
    h.pack_row_pairs(d + 3 * tp, dy, ldo, qt.n);
  });
}

void host_forward(Tensor out, Tensor lse, Tensor row_max, const AttentionInputs& x, bool merge,
                  bool bf16) {
  const HostShape h(x, bf16);
  const int G = h.G, hp = h.hp, T = kHostTile, hs = x.hs;
  const int64_t ldo = int64_t(x.NH) * hs, QO = int64_t(T) * hp;
  host_buffers().reserve(size_t(host_forward_floats(G, hp)));
  if (bf16) host_pairs().reserve(size_t(host_forward_floats(G, hp)));
  const int64_t tp = h.tile_pairs();
  Bf16Pair* keys = bf16 ? call_pairs(2 * h.key_tiles() * tp) : nullptr;
  if (bf16) pack_key_tiles(h, keys, false);
  float* o = out.data();
  float* L = lse.data();
  float* RM = row_max.data();
  const int64_t groups = int64_t(x.B) * x.KVH;
  // The longest query tiles (the last, under a causal mask) first: they end the call otherwise.
  for_each_unit_on_host("mpf::attention_forward", groups * h.nqt, [&](int64_t u, int thread) {
    float* Q = host_buffers().of(thread);
    float* O = Q + G * QO;
    float* m = O + G * QO;
    float* l = m + G * T;
    float* Kt = l + G * T;
    float* V = Kt + int64_t(hp) * T;
    float* S = V + int64_t(T) * hp;
    // bf16: Q and P as pairs (the fp32 Q, Kᵀ and V unused; Kᵀ and V the call's packed tiles).
    Bf16Pair* Qp = bf16 ? host_pairs().of(thread) : nullptr;
    Bf16Pair* Pp = bf16 ? Qp + G * QO / 2 : nullptr;
    const int qi = h.nqt - 1 - int(u / groups), b = int(u % groups) / x.KVH,
              kvh = int(u % groups) % x.KVH;
    const Tile qt = tile_at(x.queries, T, qi);
    const int32_t* doc = h.docs(b);
    const DocRange dr = doc_range_host(doc, qt, h.x.window);
    const int M = round_up(qt.n, backend::kTileRows);
    for (int g = 0; g < G; ++g) {
      if (bf16) {
        h.pack_pair_rows(Qp + g * QO / 2, h.q_row(b, qt.row, kvh * G + g), x.ldq, qt.n);
      } else {
        h.pack_rows(Q + g * QO, h.q_row(b, qt.row, kvh * G + g), x.ldq, qt.n);
      }
      std::fill(O + g * QO, O + (g + 1) * QO, 0.0f);
      std::fill(m + g * T, m + (g + 1) * T, kNegInf);
      std::fill(l + g * T, l + (g + 1) * T, 0.0f);
    }
    for (int kj = 0; kj < h.nkt; ++kj) {
      const Tile kt = tile_at(x.keys, T, kj);
      const Cover c = cover(qt, dr.lo, dr.hi, kt);
      if (c == Cover::kNone) continue;
      const int64_t at = h.kv_offset(b, kt.row, kvh);
      const Bf16Pair* Ktp = bf16 ? keys + 2 * h.key_tile(b, kvh, kj) * tp : nullptr;
      const Bf16Pair* Vp = bf16 ? Ktp + tp : nullptr;
      if (!bf16) {
        h.pack_transposed(Kt, x.k + at, x.ldkv, kt.n);
        h.pack_rows(V, x.v + at, x.ldkv, kt.n);
      }
      for (int g = 0; g < G; ++g) {
        float *Og = O + g * QO, *mg = m + g * T, *lg = l + g * T;
        if (bf16) {
          backend::tile_gemm_bf16(M, T, h.kp, Qp + g * QO / 2, h.hh, 1, Ktp, T, S, T, false);
        } else {
          backend::tile_gemm(M, T, hs, Q + g * QO, hp, 1, Kt, T, S, T, false);
        }
        h.mask(S, qt.n, qt, doc, kt, c);
        const float scale = h.scale;  // a local: the row loops' stores cannot alias it
        // The online softmax, vmath::kLanes rows at a time: their maxima and sums together
        // (vmath::rows_max, rows_sum: row_max's and row_sum's bits without a row's serial fold).
        for (int r0 = 0; r0 < qt.n; r0 += vmath::kLanes) {
          const int rows = std::min(vmath::kLanes, qt.n - r0);
          float mx[vmath::kLanes], sum[vmath::kLanes], alpha[vmath::kLanes];
          vmath::rows_max(S + r0 * T, T, T, rows, mx);
          for (int i = 0; i < rows; ++i) {
            float* __restrict s = S + (r0 + i) * T;
            if (mx[i] == kNegInf) {  // this tile holds nothing the row sees
              for (int j = 0; j < T; ++j) s[j] = 0.0f;
              continue;
            }
            const float mold = mg[r0 + i], mnew = std::max(mold, scale * mx[i]);
            alpha[i] = mold == kNegInf ? 0.0f : vmath::exp(mold - mnew);
            for (int j = 0; j < T; ++j) s[j] = exp_or_zero(scale * s[j] - mnew);
            mg[r0 + i] = mnew;
          }
          vmath::rows_sum(S + r0 * T, T, T, rows, sum);
          for (int i = 0; i < rows; ++i) {
            if (mx[i] == kNegInf) continue;
            const int r = r0 + i;
            lg[r] = lg[r] * alpha[i] + sum[i];
            if (alpha[i] != 1.0f) {
              float* orow = Og + r * hp;
              for (int d = 0; d < hs; ++d) orow[d] *= alpha[i];
            }
          }
        }
        if (bf16) {  // P rounded as it is packed
          const int pairs = (kt.n + 1) / 2;
          backend::pack_bf16_pairs(Pp, T / 2, S, T, qt.n, kt.n, M, pairs);
          backend::tile_gemm_bf16(M, hp, pairs, Pp, T / 2, 1, Vp, hp, Og, hp, true);
        } else {
          backend::tile_gemm(M, hp, kt.n, S, T, 1, V, hp, Og, hp, true);
        }
      }
    }
    for (int g = 0; g < G; ++g) {
      const int head = kvh * G + g;
      for (int r = 0; r < qt.n; ++r) {
        const float lr = l[g * T + r];
        const float mine = lr > 0.0f ? m[g * T + r] + std::log(lr) : kNegInf;
        const float inv = lr > 0.0f ? 1.0f / lr : 0.0f;
        float* dst = o + (int64_t(b) * x.queries.rows + qt.row + r) * ldo + int64_t(head) * hs;
        float* lp = L + (int64_t(b) * x.NH + head) * x.queries.rows + qt.row + r;
        const float* src = O + g * QO + r * hp;
        if (RM) {  // m is the row's running max of the scaled logits, −∞ where it saw none
          float* mp = RM + (int64_t(b) * x.NH + head) * x.queries.rows + qt.row + r;
          const float mine_max = lr > 0.0f ? m[g * T + r] : kNegInf;
          *mp = merge ? std::max(*mp, mine_max) : mine_max;
        }
        if (!merge) {
          for (int d = 0; d < hs; ++d) dst[d] = src[d] * inv;
          *lp = mine;
          continue;
        }
        const Merged w = merge_weights(*lp, mine);
        for (int d = 0; d < hs; ++d) dst[d] = w.w_old * dst[d] + w.w_new * (src[d] * inv);
        *lp = w.lse;
      }
    }
  });
}

// P and dS of one tile pair from S = Q·Kᵀ and dP = dO·Vᵀ (both (kHostTile, kHostTile), rows r <
// qt.n valid): S becomes P, dP becomes dS = scale·P⊙(dP − delta); in bf16 each is rounded for its
// product as it is packed.
void host_softmax_backward(const HostShape& h, float* S, float* dP, const Tile& qt,
                           const int32_t* doc, const Tile& kt, Cover c, const float* lse,
                           const float* delta) {
  const int T = kHostTile;
  h.mask(S, qt.n, qt, doc, kt, c);
  // Locals, not h's members: a float store in the loops could alias those, and every iteration
  // would reload them (the loops would not vectorize).
  const float scale = h.scale;
  for (int r = 0; r < qt.n; ++r) {
    float* __restrict s = S + r * T;
    float* __restrict dp = dP + r * T;
    // A row that sees no key anywhere (lse −∞) has P = 0 and no gradient.
    const float lr = lse[qt.row + r] == kNegInf ? -kNegInf : lse[qt.row + r];
    const float dr = delta[qt.row + r];
    for (int j = 0; j < T; ++j) {
      const float p = exp_or_zero(scale * s[j] - lr);
      dp[j] = scale * p * (dp[j] - dr);
      s[j] = p;
    }
  }
}

// dK and dV: a unit per (sequence, kv head, key tile), over every query tile that sees it, for the
// slice's groups and query tiles. In bf16, `keys` and `queries` are the call's packed tiles
// (pack_key_tiles, pack_query_tiles); with a store, each pair's dS is kept there.
void host_backward_kv(float* dk, float* dv, int64_t ld, bool accumulate, Tensor dout, Tensor lse,
                      Tensor delta, const HostShape& h, const Bf16Pair* keys,
                      const Bf16Pair* queries, const BackwardSlice& slice) {
  const int64_t first = slice.first, groups = slice.groups;
  const StoredScores* store = slice.store;
  const AttentionInputs& x = h.x;
  const bool bf16 = h.bf16;
  const int G = h.G, hp = h.hp, T = kHostTile, hs = x.hs, Tq = x.queries.rows;
  const int64_t tile = int64_t(T) * hp, ldo = int64_t(x.NH) * hs, tp = h.tile_pairs();
  host_buffers().reserve(size_t(host_kv_floats(hp)));
  if (bf16) host_pairs().reserve(size_t(host_kv_floats(hp)));
  for_each_unit_on_host("mpf::attention_backward_kv", groups * h.nkt, [&](int64_t u, int thread) {
    float* Kt = host_buffers().of(thread);
    float* Vt = Kt + tile;
    // dK and dV: the thread's, or the key tile's between query ranges.
    float* dK = slice.dkv ? slice.dkv + (u / groups) * 2 * tile : Vt + tile;
    float* dV = dK + tile;
    float* Q = Vt + 3 * tile;
    float* dO = Q + tile;
    float* S = dO + tile;
    float* dP = S + T * T;
    // bf16: Pᵀ and dSᵀ as A (pairs of rows read transposed); Kᵀ, Vᵀ, and Q and dO as A (pairs
    // along the head size) and as B (pairs of rows), are the call's packed tiles.
    Bf16Pair* Pt = bf16 ? host_pairs().of(thread) : nullptr;
    Bf16Pair* dSt = bf16 ? Pt + T * T / 2 : nullptr;
    // Causal: the first key tiles are seen by the most query tiles.
    const int kj = int(u / groups), b = int((first + u % groups) / x.KVH),
              kvh = int((first + u % groups) % x.KVH);
    const Tile kt = tile_at(x.keys, T, kj);
    const int64_t at = h.kv_offset(b, kt.row, kvh);
    const Bf16Pair* Ktp = bf16 ? keys + 3 * h.key_tile(b, kvh, kj) * tp : nullptr;
    const Bf16Pair* Vtp = bf16 ? Ktp + tp : nullptr;
    if (!bf16) {
      h.pack_transposed(Kt, x.k + at, x.ldkv, kt.n);
      h.pack_transposed(Vt, x.v + at, x.ldkv, kt.n);
    }
    if (slice.qa == 0) std::fill(dK, dK + 2 * tile, 0.0f);
    const int Mk = round_up(kt.n, backend::kTileRows);
    const int32_t* doc = h.docs(b);
    for (int qi = slice.qa; qi < slice.qb; ++qi) {
      const Tile qt = tile_at(x.queries, T, qi);
      const DocRange dr = doc_range_host(doc, qt, h.x.window);
      const Cover c = cover(qt, dr.lo, dr.hi, kt);
      if (c == Cover::kNone) continue;
      const int M = round_up(qt.n, backend::kTileRows);
      for (int g = 0; g < G; ++g) {
        const int head = kvh * G + g;
        const float* q = h.q_row(b, qt.row, head);
        const float* dy = dout.data() + (int64_t(b) * Tq + qt.row) * ldo + int64_t(head) * hs;
        const Bf16Pair* Qa = bf16 ? queries + 4 * h.query_tile(b, head, qi) * tp : nullptr;
        const Bf16Pair* dOa = bf16 ? Qa + tp : nullptr;
        const Bf16Pair* Qb = bf16 ? Qa + 2 * tp : nullptr;
        const Bf16Pair* dOb = bf16 ? Qa + 3 * tp : nullptr;
        if (bf16) {
          backend::tile_gemm_bf16(M, T, h.kp, Qa, h.hh, 1, Ktp, T, S, T, false);
          backend::tile_gemm_bf16(M, T, h.kp, dOa, h.hh, 1, Vtp, T, dP, T, false);
        } else {
          h.pack_rows(Q, q, x.ldq, qt.n);
          h.pack_rows(dO, dy, ldo, qt.n);
          backend::tile_gemm(M, T, hs, Q, hp, 1, Kt, T, S, T, false);
          backend::tile_gemm(M, T, hs, dO, hp, 1, Vt, T, dP, T, false);
        }
        const int64_t row0 = (int64_t(b) * x.NH + head) * Tq;
        host_softmax_backward(h, S, dP, qt, doc, kt, c, lse.data() + row0, delta.data() + row0);
        if (store) {  // bf16: rounded as it is packed, as host_backward_q packs it
          const int64_t at = store->offset(b, kvh, x.KVH, g, qi, kj, h.nqt, h.nkt);
          if (bf16) {
            backend::pack_bf16_pairs(store->pairs + at, T / 2, dP, T, qt.n, kt.n, M,
                                     (kt.n + 1) / 2);
          } else {
            std::copy(dP, dP + int64_t(M) * T, store->floats + at);
          }
        }
        // dV += Pᵀ·dO and dK += dSᵀ·Q over the tile's query rows (transposed A: sam = 1).
        if (bf16) {
          const int pairs = (qt.n + 1) / 2;
          backend::pack_bf16_column_pairs(Pt, T, S, T, qt.n, T, pairs, T);
          backend::pack_bf16_column_pairs(dSt, T, dP, T, qt.n, T, pairs, T);
          backend::tile_gemm_bf16(Mk, hp, pairs, Pt, 1, T, dOb, hp, dV, hp, true);
          backend::tile_gemm_bf16(Mk, hp, pairs, dSt, 1, T, Qb, hp, dK, hp, true);
        } else {
          backend::tile_gemm(Mk, hp, qt.n, S, 1, T, dO, hp, dV, hp, true);
          backend::tile_gemm(Mk, hp, qt.n, dP, 1, T, Q, hp, dK, hp, true);
        }
      }
    }
    if (slice.qb < h.nqt) return;  // more query ranges to come
    for (int r = 0; r < kt.n; ++r) {
      float* k_out = dk + (int64_t(b) * x.keys.rows + kt.row + r) * ld + int64_t(kvh) * hs;
      float* v_out = dv + (int64_t(b) * x.keys.rows + kt.row + r) * ld + int64_t(kvh) * hs;
      const float *k_in = dK + r * hp, *v_in = dV + r * hp;
      for (int d = 0; d < hs; ++d) {
        k_out[d] = accumulate ? k_out[d] + k_in[d] : k_in[d];
        v_out[d] = accumulate ? v_out[d] + v_in[d] : v_in[d];
      }
    }
  });
}

// dQ: a unit per (sequence, kv head, query tile), over every key tile it sees; `keys`, `queries`
// and the slice as host_backward_kv's (with a store, dS is read from it).
void host_backward_q(float* dq, int64_t ld, bool accumulate, Tensor dout, Tensor lse, Tensor delta,
                     const HostShape& h, const Bf16Pair* keys, const Bf16Pair* queries,
                     const BackwardSlice& slice) {
  const int64_t first = slice.first, groups = slice.groups;
  const StoredScores* store = slice.store;
  const AttentionInputs& x = h.x;
  const bool bf16 = h.bf16;
  const int G = h.G, hp = h.hp, T = kHostTile, hs = x.hs, Tq = x.queries.rows;
  const int64_t tile = int64_t(T) * hp, ldo = int64_t(x.NH) * hs, tp = h.tile_pairs();
  host_buffers().reserve(size_t(host_q_floats(G, hp)));
  if (bf16) host_pairs().reserve(size_t(host_q_floats(G, hp)));
  const int64_t tiles = slice.qb - slice.qa;
  for_each_unit_on_host("mpf::attention_backward_q", groups * tiles, [&](int64_t u, int thread) {
    float* Q = host_buffers().of(thread);
    float* dO = Q + G * tile;
    float* dQ = dO + G * tile;
    float* Kt = dQ + G * tile;
    float* Vt = Kt + tile;
    float* K = Vt + tile;
    float* S = K + tile;
    float* dP = S + T * T;
    // bf16: dS as A; Q and dO as A, Kᵀ and Vᵀ as B, K as B (pairs of rows) are the call's
    // packed tiles.
    Bf16Pair* dSp = bf16 ? host_pairs().of(thread) : nullptr;
    const int qi = slice.qb - 1 - int(u / groups), b = int((first + u % groups) / x.KVH),
              kvh = int((first + u % groups) % x.KVH);
    const Tile qt = tile_at(x.queries, T, qi);
    const int32_t* doc = h.docs(b);
    const DocRange dr = doc_range_host(doc, qt, h.x.window);
    const int M = round_up(qt.n, backend::kTileRows);
    for (int g = 0; !bf16 && !store && g < G; ++g) {
      const int head = kvh * G + g;
      const float* dy = dout.data() + (int64_t(b) * Tq + qt.row) * ldo + int64_t(head) * hs;
      h.pack_rows(Q + g * tile, h.q_row(b, qt.row, head), x.ldq, qt.n);
      h.pack_rows(dO + g * tile, dy, ldo, qt.n);
    }
    std::fill(dQ, dQ + G * tile, 0.0f);
    for (int kj = 0; kj < h.nkt; ++kj) {
      const Tile kt = tile_at(x.keys, T, kj);
      const Cover c = cover(qt, dr.lo, dr.hi, kt);
      if (c == Cover::kNone) continue;
      const int64_t at = h.kv_offset(b, kt.row, kvh);
      const Bf16Pair* Ktp = bf16 ? keys + 3 * h.key_tile(b, kvh, kj) * tp : nullptr;
      const Bf16Pair* Vtp = bf16 ? Ktp + tp : nullptr;
      const Bf16Pair* Kb = bf16 ? Ktp + 2 * tp : nullptr;
      if (!bf16 && !store) {
        h.pack_transposed(Kt, x.k + at, x.ldkv, kt.n);
        h.pack_transposed(Vt, x.v + at, x.ldkv, kt.n);
      }
      if (!bf16) h.pack_rows(K, x.k + at, x.ldkv, kt.n);
      for (int g = 0; g < G; ++g) {
        const int head = kvh * G + g;
        if (store) {  // dS as the dK/dV pass left it
          const int64_t at = store->offset(b, kvh, x.KVH, g, qi, kj, h.nqt, h.nkt);
          if (bf16) {
            backend::tile_gemm_bf16(M, hp, (kt.n + 1) / 2, store->pairs + at, T / 2, 1, Kb, hp,
                                    dQ + g * tile, hp, true);
          } else {
            backend::tile_gemm(M, hp, kt.n, store->floats + at, T, 1, K, hp, dQ + g * tile, hp,
                               true);
          }
          continue;
        }
        if (bf16) {
          const Bf16Pair* Qa = queries + 4 * h.query_tile(b, head, qi) * tp;
          backend::tile_gemm_bf16(M, T, h.kp, Qa, h.hh, 1, Ktp, T, S, T, false);
          backend::tile_gemm_bf16(M, T, h.kp, Qa + tp, h.hh, 1, Vtp, T, dP, T, false);
        } else {
          backend::tile_gemm(M, T, hs, Q + g * tile, hp, 1, Kt, T, S, T, false);
          backend::tile_gemm(M, T, hs, dO + g * tile, hp, 1, Vt, T, dP, T, false);
        }
        const int64_t row0 = (int64_t(b) * x.NH + head) * Tq;
        host_softmax_backward(h, S, dP, qt, doc, kt, c, lse.data() + row0, delta.data() + row0);
        if (bf16) {  // dS rounded as it is packed
          const int pairs = (kt.n + 1) / 2;
          backend::pack_bf16_pairs(dSp, T / 2, dP, T, qt.n, kt.n, M, pairs);
          backend::tile_gemm_bf16(M, hp, pairs, dSp, T / 2, 1, Kb, hp, dQ + g * tile, hp, true);
        } else {
          backend::tile_gemm(M, hp, kt.n, dP, T, 1, K, hp, dQ + g * tile, hp, true);
        }
      }
    }
    for (int g = 0; g < G; ++g) {
      const int head = kvh * G + g;
      for (int r = 0; r < qt.n; ++r) {
        float* out = dq + (int64_t(b) * Tq + qt.row + r) * ld + int64_t(head) * hs;
        const float* in = dQ + g * tile + r * hp;
        for (int d = 0; d < hs; ++d) out[d] = accumulate ? out[d] + in[d] : in[d];
      }
    }
  });
}

// The tile pairs each sequence sees (StoredScores::slot, visible), and whether the dS of one of
// its query tiles, for every head of a group, fits the store (else none is kept).
bool plan_stored_scores(const HostShape& h, StoredScores& store) {
  const AttentionInputs& x = h.x;
  store.words = score_tile_words(h.bf16);
  store.slot.assign(size_t(int64_t(x.B) * h.nqt * h.nkt), -1);
  store.visible.assign(size_t(x.B), 0);
  int64_t widest = 0;  // the most pairs one query tile sees
  for (int b = 0; b < x.B; ++b) {
    const int32_t* doc = h.docs(b);
    int32_t n = 0;
    for (int qi = 0; qi < h.nqt; ++qi) {
      const Tile qt = tile_at(x.queries, kHostTile, qi);
      const DocRange dr = doc_range_host(doc, qt, x.window);
      const int32_t before = n;
      for (int kj = 0; kj < h.nkt; ++kj) {
        if (cover(qt, dr.lo, dr.hi, tile_at(x.keys, kHostTile, kj)) == Cover::kNone) continue;
        store.slot[size_t((int64_t(b) * h.nqt + qi) * h.nkt + kj)] = n++;
      }
      widest = std::max(widest, int64_t(n - before));
    }
    store.visible[size_t(b)] = n;
  }
  return int64_t(h.G) * widest * store.words * 4 <= g_stored_scores_bytes;
}

// Runs both passes over one slice.
void backward_slice(float* dq, int64_t lddq, bool accumulate_dq, float* dk, float* dv,
                    int64_t lddkv, bool accumulate_dkv, Tensor dout, Tensor lse, Tensor delta,
                    const HostShape& h, const Bf16Pair* keys, const Bf16Pair* queries,
                    const BackwardSlice& slice) {
  host_backward_kv(dk, dv, lddkv, accumulate_dkv, dout, lse, delta, h, keys, queries, slice);
  host_backward_q(dq, lddq, accumulate_dq, dout, lse, delta, h, keys, queries, slice);
}

// The host shape's backward: dS kept between the passes where it fits (StoredScores), and in
// bf16 K, V, Q and dO packed once for both.
void host_backward(float* dq, int64_t lddq, bool accumulate_dq, float* dk, float* dv, int64_t lddkv,
                   bool accumulate_dkv, Tensor dout, Tensor lse, Tensor delta,
                   const AttentionInputs& x, bool bf16) {
  const HostShape h(x, bf16);
  const Bf16Pair *keys = nullptr, *queries = nullptr;
  if (bf16) {
    const int64_t tp = h.tile_pairs(), key_pairs = 3 * h.key_tiles() * tp;
    Bf16Pair* pairs = call_pairs(key_pairs + 4 * h.query_tiles() * tp);
    pack_key_tiles(h, pairs, true);
    pack_query_tiles(h, pairs + key_pairs, dout.data());
    keys = pairs;
    queries = pairs + key_pairs;
  }
  auto run = [&](const BackwardSlice& slice) {
    backward_slice(dq, lddq, accumulate_dq, dk, dv, lddkv, accumulate_dkv, dout, lse, delta, h,
                   keys, queries, slice);
  };
  const int64_t groups = int64_t(x.B) * x.KVH, limit = g_stored_scores_bytes / 4;
  StoredScores store;
  if (!plan_stored_scores(h, store)) {
    run(BackwardSlice{0, groups, 0, h.nqt, nullptr, nullptr});
    return;
  }
  auto keep = [&](int64_t words) {
    if (bf16) {
      store.pairs = stored_score_tiles<Bf16Pair>(words);
    } else {
      store.floats = stored_score_tiles<float>(words);
    }
  };
  for (int64_t g0 = 0; g0 < groups;) {
    const int b = int(g0 / x.KVH);
    const int64_t whole = int64_t(h.G) * store.visible[size_t(b)] * store.words;
    if (whole <= limit) {
      // Slices of whole groups whose dS fits, each group's tiles one after another.
      store.first = g0;
      store.pair_base = 0;
      store.base.assign(1, 0);
      store.per_head.clear();
      int64_t end = g0;
      for (; end < groups; ++end) {
        const int64_t pairs = store.visible[size_t(end / x.KVH)];
        const int64_t need = store.base.back() + int64_t(h.G) * pairs * store.words;
        if (end > g0 && need > limit) break;
        store.base.push_back(need);
        store.per_head.push_back(pairs);
      }
      store.count = end - g0;
      keep(store.base.back());
      run(BackwardSlice{g0, store.count, 0, h.nqt, &store, nullptr});
      g0 = end;
      continue;
    }
    // One group in ranges of its query tiles, each range's dS fitting, dK and dV kept between.
    float* dkv = key_tile_gradients(2 * h.nkt * int64_t(kHostTile) * h.hp);
    const int32_t* slot = store.slot.data() + int64_t(b) * h.nqt * h.nkt;
    auto first_slot = [&](int qi) {  // the slot of query tile qi's first pair (or the end)
      for (; qi < h.nqt; ++qi) {
        for (int kj = 0; kj < h.nkt; ++kj) {
          if (slot[int64_t(qi) * h.nkt + kj] >= 0) return int64_t(slot[int64_t(qi) * h.nkt + kj]);
        }
      }
      return store.visible[size_t(b)];
    };
    for (int qa = 0; qa < h.nqt;) {
      const int64_t from = first_slot(qa);
      int qb = qa + 1;
      while (qb < h.nqt && int64_t(h.G) * (first_slot(qb + 1) - from) * store.words <= limit) ++qb;
      store.first = g0;
      store.count = 1;
      store.pair_base = from;
      store.base.assign(1, 0);
      store.per_head.assign(1, first_slot(qb) - from);
      keep(int64_t(h.G) * store.per_head[0] * store.words);
      run(BackwardSlice{g0, 1, qa, qb, &store, dkv});
      qa = qb;
    }
    ++g0;
  }
}

// ---- the device shape ---------------------------------------------------------------------------
// A Kokkos team per unit. A team's rows are the G query heads of its kv head times Bq positions
// (row ρ = g·Bq + r), so a K/V tile in scratch serves the whole group; the K/V tiles hold Bk keys.
// Every element of a tile product is one thread's dot product over the head size, read from team
// scratch; a row's softmax statistics are one thread's.

struct DeviceTiles {
  int rows, bq, bk;  // team rows (G·bq), query positions and keys per tile
};

// The team size and the scratch a team may have: 4 warps on a GPU; on the host (the device shape
// run in tests) as many threads as a team may have, up to 4.
TeamPolicy team_shape(int64_t units) {
  if constexpr (kDeviceMemory) {
    return TeamPolicy(units, 128);
  } else {
    TeamPolicy probe(units, 1);
    const int most = probe.team_size_max([](const TeamMember&) {}, Kokkos::ParallelForTag());
    return TeamPolicy(units, std::clamp(most, 1, 4));
  }
}

// Floats a kernel's team keeps in scratch, as the kernels below carve it.
size_t forward_scratch(const DeviceTiles& t, int hs) {
  return size_t(2 * t.bk * (hs + 1) + 2 * t.rows * hs + t.rows * t.bk + 3 * t.rows);
}
size_t backward_kv_scratch(const DeviceTiles& t, int hs) {
  return size_t(2 * t.bk * (hs + 1) + 2 * t.bk * hs + 2 * t.rows * hs + 2 * t.rows * t.bk +
                2 * t.rows);
}
size_t backward_q_scratch(const DeviceTiles& t, int hs) {
  return size_t(2 * t.bk * (hs + 1) + 3 * t.rows * hs + t.rows * t.bk + 2 * t.rows);
}

// 32 keys a tile for head sizes up to 64, fewer for larger heads, halved until every kernel's
// scratch fits what the device gives a team (48 KB on most GPUs, 32 KB in a Serial host team).
DeviceTiles device_tiles(int G, int hs) {
  static const size_t limit = size_t(team_shape(1).scratch_size_max(0));
  int bk = hs <= 64 ? 32 : (hs <= 128 ? 16 : 8);
  for (;; bk /= 2) {
    const int bq = std::max(1, bk / G);
    const DeviceTiles t{G * bq, bq, bk};
    const size_t most =
        std::max({forward_scratch(t, hs), backward_kv_scratch(t, hs), backward_q_scratch(t, hs)}) *
        sizeof(float);
    if (most <= limit) return t;
    if (bk == 1) {
      MPF_FATAL("attention: " + std::to_string(G) + " query heads of size " + std::to_string(hs) +
                " need " + std::to_string(most) + " bytes of team scratch; this device offers " +
                std::to_string(limit));
    }
  }
}

TeamPolicy team_policy(int64_t units, size_t scratch_floats) {
  return team_shape(units).set_scratch_size(0, Kokkos::PerTeam(scratch_floats * sizeof(float)));
}

// The lowest and highest document start among a tile's rows, over the team.
KOKKOS_INLINE_FUNCTION DocRange doc_range_team(const TeamMember& team, const int32_t* doc,
                                               const Tile& t, int window) {
  if (!doc && window == 0) return {};
  int lo = 0, hi = 0;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, t.n),
      [&](int i, int& acc) {
        const int v = first_key(doc, t.row + i, t.pos + i, window);
        acc = v < acc ? v : acc;
      },
      Kokkos::Min<int>(lo));
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, t.n),
      [&](int i, int& acc) {
        const int v = first_key(doc, t.row + i, t.pos + i, window);
        acc = v > acc ? v : acc;
      },
      Kokkos::Max<int>(hi));
  return {lo, hi};
}

void device_forward(Tensor out, Tensor lse, Tensor row_max, const AttentionInputs& x, bool merge,
                    bool bf16) {
  const int G = x.NH / x.KVH, hs = x.hs, NH = x.NH, KVH = x.KVH;
  // K and V tile rows are hs + 1 floats apart: the threads of a warp read one column of them at
  // once, which rows hs apart (a multiple of 32) would put in one shared-memory bank.
  const int KS = hs + 1;
  const DeviceTiles tiles = device_tiles(G, hs);
  const int R = tiles.rows, BQ = tiles.bq, BK = tiles.bk;
  const int nqt = tile_count(x.queries, BQ), nkt = tile_count(x.keys, BK);
  const int Tq = x.queries.rows, Tk = x.keys.rows;
  const int64_t ldq = x.ldq, ldkv = x.ldkv, ldo = int64_t(NH) * hs;
  const float scale = 1.0f / std::sqrt(float(hs));
  const float *q = x.q, *k = x.k, *v = x.v;
  const int32_t* doc_start = x.doc_start;
  const int window = x.window;
  const PositionRuns qruns = x.queries, kruns = x.keys;
  float* o = out.data();
  float* L = lse.data();
  float* RM = row_max.data();
  const int64_t groups = int64_t(x.B) * KVH;
  const profile::Scope timer("mpf::attention_forward");
  Kokkos::parallel_for(
      "mpf::attention_forward", team_policy(groups * nqt, forward_scratch(tiles, hs)),
      KOKKOS_LAMBDA(const TeamMember& team) {
        const int64_t u = team.league_rank();
        const int qi = nqt - 1 - int(u / groups), b = int(u % groups) / KVH,
                  kvh = int(u % groups) % KVH;
        float* Ks = static_cast<float*>(team.team_shmem().get_shmem(
            sizeof(float) * (2 * BK * KS + 2 * R * hs + R * BK + 3 * R)));
        float* Vs = Ks + BK * KS;
        float* Qs = Vs + BK * KS;
        float* Os = Qs + R * hs;
        float* Ss = Os + R * hs;
        float* ms = Ss + R * BK;
        float* ls = ms + R;
        float* alpha = ls + R;
        const Tile qt = tile_at(qruns, BQ, qi);
        const int32_t* doc = doc_start ? doc_start + int64_t(b) * Tq : nullptr;
        const DocRange dr = doc_range_team(team, doc, qt, window);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, R * hs), [&](int i) {
          const int rho = i / hs, d = i % hs, g = rho / BQ, r = rho % BQ;
          Qs[i] = r < qt.n
                      ? round_if(
                            bf16,
                            q[(int64_t(b) * Tq + qt.row + r) * ldq + int64_t(kvh * G + g) * hs + d])
                      : 0.0f;
          Os[i] = 0.0f;
        });
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, R), [&](int rho) {
          ms[rho] = kNegInf;
          ls[rho] = 0.0f;
        });
        team.team_barrier();
        for (int kj = 0; kj < nkt; ++kj) {
          const Tile kt = tile_at(kruns, BK, kj);
          const Cover c = cover(qt, dr.lo, dr.hi, kt);
          if (c == Cover::kNone) continue;
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BK * hs), [&](int i) {
            const int j = i / hs, d = i % hs;
            const int64_t at = (int64_t(b) * Tk + kt.row + j) * ldkv + int64_t(kvh) * hs + d;
            Ks[j * KS + d] = j < kt.n ? round_if(bf16, k[at]) : 0.0f;
            Vs[j * KS + d] = j < kt.n ? round_if(bf16, v[at]) : 0.0f;
          });
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, R * BK), [&](int i) {
            const int rho = i / BK, j = i % BK, r = rho % BQ;
            bool visible = r < qt.n && j < kt.n;
            if (visible && c == Cover::kPart) {
              visible =
                  sees(qt.pos + r, first_key(doc, qt.row + r, qt.pos + r, window), kt.pos + j);
            }
            float dot = 0.0f;
            for (int d = 0; d < hs; ++d) dot += Qs[rho * hs + d] * Ks[j * KS + d];
            Ss[i] = visible ? scale * dot : kNegInf;
          });
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, R), [&](int rho) {
            float* s = Ss + rho * BK;
            float mx = kNegInf;
            for (int j = 0; j < BK; ++j) mx = s[j] > mx ? s[j] : mx;
            if (mx == kNegInf) {
              for (int j = 0; j < BK; ++j) s[j] = 0.0f;
              alpha[rho] = 1.0f;
              return;
            }
            const float mnew = ms[rho] > mx ? ms[rho] : mx;
            alpha[rho] = ms[rho] == kNegInf ? 0.0f : vmath::exp(ms[rho] - mnew);
            float sum = 0.0f;
            for (int j = 0; j < BK; ++j) {
              const float p = s[j] == kNegInf ? 0.0f : vmath::exp(s[j] - mnew);
              sum += p;
              s[j] = round_if(bf16, p);
            }
            ls[rho] = ls[rho] * alpha[rho] + sum;
            ms[rho] = mnew;
          });
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, R * hs), [&](int i) {
            const int rho = i / hs, d = i % hs;
            float acc = Os[i] * alpha[rho];
            for (int j = 0; j < BK; ++j) acc += Ss[rho * BK + j] * Vs[j * KS + d];
            Os[i] = acc;
          });
          team.team_barrier();
        }
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, R * hs), [&](int i) {
          const int rho = i / hs, d = i % hs, g = rho / BQ, r = rho % BQ, head = kvh * G + g;
          if (r >= qt.n) return;
          const float lr = ls[rho];
          const float mine = lr > 0.0f ? ms[rho] + logf(lr) : kNegInf;
          const float value = lr > 0.0f ? Os[i] / lr : 0.0f;
          float* dst = o + (int64_t(b) * Tq + qt.row + r) * ldo + int64_t(head) * hs + d;
          float* lp = L + (int64_t(b) * NH + head) * Tq + qt.row + r;
          if (!merge) {
            *dst = value;
          } else {
            const Merged w = merge_weights(*lp, mine);
            *dst = w.w_old * *dst + w.w_new * value;
          }
        });
        team.team_barrier();
        // The logsumexps last: the merge above read the old ones.
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, R), [&](int rho) {
          const int g = rho / BQ, r = rho % BQ, head = kvh * G + g;
          if (r >= qt.n) return;
          const float lr = ls[rho];
          const float mine = lr > 0.0f ? ms[rho] + logf(lr) : kNegInf;
          float* lp = L + (int64_t(b) * NH + head) * Tq + qt.row + r;
          *lp = merge ? merge_weights(*lp, mine).lse : mine;
          if (RM) {
            float* mp = RM + (int64_t(b) * NH + head) * Tq + qt.row + r;
            const float mine_max = lr > 0.0f ? ms[rho] : kNegInf;
            *mp = merge ? (*mp > mine_max ? *mp : mine_max) : mine_max;
          }
        });
      });
}

// S = Q·Kᵀ and dP = dO·Vᵀ of one tile pair into Ss and dPs (R, BK), then P and dS in place.
struct DeviceBackwardTile {
  const float *Qs, *dOs, *Ks, *Vs, *lse_s, *delta_s;
  float *Ss, *dPs;
  int R, BQ, BK, hs, KS;
  float scale;
  bool bf16;
  int window;
  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember& team, const Tile& qt, const Tile& kt,
                                         Cover c, const int32_t* doc) const {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, R * BK), [&](int i) {
      const int rho = i / BK, j = i % BK, r = rho % BQ;
      bool visible = r < qt.n && j < kt.n && lse_s[rho] != kNegInf;
      if (visible && c == Cover::kPart) {
        visible = sees(qt.pos + r, first_key(doc, qt.row + r, qt.pos + r, window), kt.pos + j);
      }
      float s = 0.0f, dp = 0.0f;
      for (int d = 0; d < hs; ++d) {
        s += Qs[rho * hs + d] * Ks[j * KS + d];
        dp += dOs[rho * hs + d] * Vs[j * KS + d];
      }
      const float p = visible ? vmath::exp(scale * s - lse_s[rho]) : 0.0f;
      Ss[i] = round_if(bf16, p);
      dPs[i] = round_if(bf16, scale * p * (dp - delta_s[rho]));
    });
    team.team_barrier();
  }
};

// Loads Q and dO of a query tile's rows (all heads of the group), with their lse and delta.
KOKKOS_INLINE_FUNCTION void load_query_rows(const TeamMember& team, float* Qs, float* dOs,
                                            float* lse_s, float* delta_s, const float* q,
                                            int64_t ldq, const float* dout, const float* lse,
                                            const float* delta, int b, int kvh, int G, int NH,
                                            int Tq, int R, int BQ, int hs, const Tile& qt,
                                            bool bf16) {
  const int64_t ldo = int64_t(NH) * hs;
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, R * hs), [&](int i) {
    const int rho = i / hs, d = i % hs, g = rho / BQ, r = rho % BQ, head = kvh * G + g;
    const bool valid = r < qt.n;
    const int64_t row = int64_t(b) * Tq + qt.row + r;
    Qs[i] = valid ? round_if(bf16, q[row * ldq + int64_t(head) * hs + d]) : 0.0f;
    dOs[i] = valid ? round_if(bf16, dout[row * ldo + int64_t(head) * hs + d]) : 0.0f;
  });
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, R), [&](int rho) {
    const int g = rho / BQ, r = rho % BQ, head = kvh * G + g;
    const int64_t at = (int64_t(b) * NH + head) * Tq + qt.row + r;
    lse_s[rho] = r < qt.n ? lse[at] : kNegInf;
    delta_s[rho] = r < qt.n ? delta[at] : 0.0f;
  });
  team.team_barrier();
}

void device_backward_kv(float* dk, float* dv, int64_t ld, bool accumulate, Tensor dout, Tensor lse,
                        Tensor delta, const AttentionInputs& x, bool bf16) {
  const int G = x.NH / x.KVH, hs = x.hs, NH = x.NH, KVH = x.KVH;
  // K and V tile rows are hs + 1 floats apart: the threads of a warp read one column of them at
  // once, which rows hs apart (a multiple of 32) would put in one shared-memory bank.
  const int KS = hs + 1;
  const DeviceTiles tiles = device_tiles(G, hs);
  const int R = tiles.rows, BQ = tiles.bq, BK = tiles.bk;
  const int nqt = tile_count(x.queries, BQ), nkt = tile_count(x.keys, BK);
  const int Tq = x.queries.rows, Tk = x.keys.rows;
  const int64_t ldq = x.ldq, ldkv = x.ldkv;
  const float scale = 1.0f / std::sqrt(float(hs));
  const float *q = x.q, *k = x.k, *v = x.v, *dO = dout.data(), *L = lse.data(), *D = delta.data();
  const int32_t* doc_start = x.doc_start;
  const int window = x.window;
  const PositionRuns qruns = x.queries, kruns = x.keys;
  const int64_t groups = int64_t(x.B) * KVH;
  const profile::Scope timer("mpf::attention_backward_kv");
  Kokkos::parallel_for(
      "mpf::attention_backward_kv", team_policy(groups * nkt, backward_kv_scratch(tiles, hs)),
      KOKKOS_LAMBDA(const TeamMember& team) {
        const int64_t u = team.league_rank();
        const int kj = int(u / groups), b = int(u % groups) / KVH, kvh = int(u % groups) % KVH;
        float* Ks = static_cast<float*>(team.team_shmem().get_shmem(
            sizeof(float) * (2 * BK * KS + 2 * BK * hs + 2 * R * hs + 2 * R * BK + 2 * R)));
        float* Vs = Ks + BK * KS;
        float* dKs = Vs + BK * KS;
        float* dVs = dKs + BK * hs;
        float* Qs = dVs + BK * hs;
        float* dOs = Qs + R * hs;
        float* Ss = dOs + R * hs;
        float* dPs = Ss + R * BK;
        float* lse_s = dPs + R * BK;
        float* delta_s = lse_s + R;
        const Tile kt = tile_at(kruns, BK, kj);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BK * hs), [&](int i) {
          const int j = i / hs, d = i % hs;
          const int64_t at = (int64_t(b) * Tk + kt.row + j) * ldkv + int64_t(kvh) * hs + d;
          Ks[j * KS + d] = j < kt.n ? round_if(bf16, k[at]) : 0.0f;
          Vs[j * KS + d] = j < kt.n ? round_if(bf16, v[at]) : 0.0f;
          dKs[i] = 0.0f;
          dVs[i] = 0.0f;
        });
        team.team_barrier();
        const int32_t* doc = doc_start ? doc_start + int64_t(b) * Tq : nullptr;
        const DeviceBackwardTile pair{Qs, dOs, Ks, Vs, lse_s, delta_s, Ss,   dPs,
                                      R,  BQ,  BK, hs, KS,    scale,   bf16, window};
        for (int qi = 0; qi < nqt; ++qi) {
          const Tile qt = tile_at(qruns, BQ, qi);
          const DocRange dr = doc_range_team(team, doc, qt, window);
          const Cover c = cover(qt, dr.lo, dr.hi, kt);
          if (c == Cover::kNone) continue;
          load_query_rows(team, Qs, dOs, lse_s, delta_s, q, ldq, dO, L, D, b, kvh, G, NH, Tq, R, BQ,
                          hs, qt, bf16);
          pair(team, qt, kt, c, doc);
          // dV += Pᵀ·dO, dK += dSᵀ·Q, the rows (heads of the group, then positions) in order.
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BK * hs), [&](int i) {
            const int j = i / hs, d = i % hs;
            float av = 0.0f, ak = 0.0f;
            for (int rho = 0; rho < R; ++rho) {
              av += Ss[rho * BK + j] * dOs[rho * hs + d];
              ak += dPs[rho * BK + j] * Qs[rho * hs + d];
            }
            dVs[i] += av;
            dKs[i] += ak;
          });
          team.team_barrier();
        }
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BK * hs), [&](int i) {
          const int j = i / hs, d = i % hs;
          if (j >= kt.n) return;
          const int64_t at = (int64_t(b) * Tk + kt.row + j) * ld + int64_t(kvh) * hs + d;
          dk[at] = accumulate ? dk[at] + dKs[i] : dKs[i];
          dv[at] = accumulate ? dv[at] + dVs[i] : dVs[i];
        });
      });
}

void device_backward_q(float* dq, int64_t ld, bool accumulate, Tensor dout, Tensor lse,
                       Tensor delta, const AttentionInputs& x, bool bf16) {
  const int G = x.NH / x.KVH, hs = x.hs, NH = x.NH, KVH = x.KVH;
  // K and V tile rows are hs + 1 floats apart: the threads of a warp read one column of them at
  // once, which rows hs apart (a multiple of 32) would put in one shared-memory bank.
  const int KS = hs + 1;
  const DeviceTiles tiles = device_tiles(G, hs);
  const int R = tiles.rows, BQ = tiles.bq, BK = tiles.bk;
  const int nqt = tile_count(x.queries, BQ), nkt = tile_count(x.keys, BK);
  const int Tq = x.queries.rows, Tk = x.keys.rows;
  const int64_t ldq = x.ldq, ldkv = x.ldkv;
  const float scale = 1.0f / std::sqrt(float(hs));
  const float *q = x.q, *k = x.k, *v = x.v, *dO = dout.data(), *L = lse.data(), *D = delta.data();
  const int32_t* doc_start = x.doc_start;
  const int window = x.window;
  const PositionRuns qruns = x.queries, kruns = x.keys;
  const int64_t groups = int64_t(x.B) * KVH;
  const profile::Scope timer("mpf::attention_backward_q");
  Kokkos::parallel_for(
      "mpf::attention_backward_q", team_policy(groups * nqt, backward_q_scratch(tiles, hs)),
      KOKKOS_LAMBDA(const TeamMember& team) {
        const int64_t u = team.league_rank();
        const int qi = nqt - 1 - int(u / groups), b = int(u % groups) / KVH,
                  kvh = int(u % groups) % KVH;
        float* Ks = static_cast<float*>(team.team_shmem().get_shmem(
            sizeof(float) * (2 * BK * KS + 3 * R * hs + R * BK + 2 * R)));
        float* Vs = Ks + BK * KS;
        float* Qs = Vs + BK * KS;
        float* dOs = Qs + R * hs;
        float* dQs = dOs + R * hs;
        float* dPs = dQs + R * hs;
        float* lse_s = dPs + R * BK;
        float* delta_s = lse_s + R;
        const Tile qt = tile_at(qruns, BQ, qi);
        const int32_t* doc = doc_start ? doc_start + int64_t(b) * Tq : nullptr;
        const DocRange dr = doc_range_team(team, doc, qt, window);
        load_query_rows(team, Qs, dOs, lse_s, delta_s, q, ldq, dO, L, D, b, kvh, G, NH, Tq, R, BQ,
                        hs, qt, bf16);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, R * hs), [&](int i) { dQs[i] = 0.0f; });
        team.team_barrier();
        for (int kj = 0; kj < nkt; ++kj) {
          const Tile kt = tile_at(kruns, BK, kj);
          const Cover c = cover(qt, dr.lo, dr.hi, kt);
          if (c == Cover::kNone) continue;
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BK * hs), [&](int i) {
            const int j = i / hs, d = i % hs;
            const int64_t at = (int64_t(b) * Tk + kt.row + j) * ldkv + int64_t(kvh) * hs + d;
            Ks[j * KS + d] = j < kt.n ? round_if(bf16, k[at]) : 0.0f;
            Vs[j * KS + d] = j < kt.n ? round_if(bf16, v[at]) : 0.0f;
          });
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, R * BK), [&](int i) {
            const int rho = i / BK, j = i % BK, r = rho % BQ;
            bool visible = r < qt.n && j < kt.n && lse_s[rho] != kNegInf;
            if (visible && c == Cover::kPart) {
              visible =
                  sees(qt.pos + r, first_key(doc, qt.row + r, qt.pos + r, window), kt.pos + j);
            }
            float s = 0.0f, dp = 0.0f;
            for (int d = 0; d < hs; ++d) {
              s += Qs[rho * hs + d] * Ks[j * KS + d];
              dp += dOs[rho * hs + d] * Vs[j * KS + d];
            }
            const float p = visible ? vmath::exp(scale * s - lse_s[rho]) : 0.0f;
            dPs[i] = round_if(bf16, scale * p * (dp - delta_s[rho]));
          });
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, R * hs), [&](int i) {
            const int rho = i / hs, d = i % hs;
            float acc = dQs[i];
            for (int j = 0; j < BK; ++j) acc += dPs[rho * BK + j] * Ks[j * KS + d];
            dQs[i] = acc;
          });
          team.team_barrier();
        }
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, R * hs), [&](int i) {
          const int rho = i / hs, d = i % hs, g = rho / BQ, r = rho % BQ, head = kvh * G + g;
          if (r >= qt.n) return;
          const int64_t at = (int64_t(b) * Tq + qt.row + r) * ld + int64_t(head) * hs + d;
          dq[at] = accumulate ? dq[at] + dQs[i] : dQs[i];
        });
      });
}

// The attention's shape: the device shape in a GPU build whatever a test asked for (the host
// shape reads host memory), else the current kernel shape.
bool device_shape() {
  return kDeviceMemory || device_shaped();
}

void check(const AttentionInputs& x) {
  if (x.KVH < 1 || x.NH % x.KVH != 0 || x.hs < 1 || x.B < 1 || x.queries.count < 1 ||
      x.keys.count < 1) {
    MPF_FATAL("attention: bad shape (NH a multiple of KVH, at least one row and head)");
  }
}

}  // namespace

void attention_forward(Tensor out, Tensor lse, const AttentionInputs& x, bool merge,
                       Tensor row_max) {
  check(x);
  const bool bf16 = products_in_bf16();
  if (device_shape()) {
    device_forward(out, lse, row_max, x, merge, bf16);
  } else {
    host_forward(out, lse, row_max, x, merge, bf16);
  }
}

void fold_head_max(float* head_max, Tensor row_max, int B, int NH, int rows) {
  // A thread per head, its rows of every sequence in order (max is exact: any order gives the
  // same value).
  for_each_heavy(
      "mpf::attention_head_max", NH, KOKKOS_LAMBDA(int64_t h) {
        float m = head_max[h];
        for (int b = 0; b < B; ++b) {
          const float* r = row_max.data() + (int64_t(b) * NH + h) * rows;
          for (int t = 0; t < rows; ++t) m = r[t] > m ? r[t] : m;
        }
        head_max[h] = m;
      });
}

void attention_backward_delta(Tensor delta, Tensor out, Tensor dout, int B, int rows, int NH,
                              int hs) {
  const int64_t ldo = int64_t(NH) * hs;
  // delta is (B, NH, rows); element i is row t of head h of sequence b.
  for_each(
      "mpf::attention_backward_delta", int64_t(B) * NH * rows, KOKKOS_LAMBDA(int64_t i) {
        const int64_t t = i % rows, h = (i / rows) % NH, b = i / (int64_t(rows) * NH);
        const int64_t at = (b * rows + t) * ldo + h * hs;
        float acc = 0.0f;
        for (int d = 0; d < hs; ++d) acc += dout(at + d) * out(at + d);
        delta(i) = acc;
      });
}

void attention_backward(float* dq, int64_t lddq, bool accumulate_dq, float* dk, float* dv,
                        int64_t lddkv, bool accumulate_dkv, Tensor dout, Tensor lse, Tensor delta,
                        const AttentionInputs& x) {
  check(x);
  const bool bf16 = products_in_bf16();
  if (device_shape()) {
    device_backward_kv(dk, dv, lddkv, accumulate_dkv, dout, lse, delta, x, bf16);
    device_backward_q(dq, lddq, accumulate_dq, dout, lse, delta, x, bf16);
  } else {
    host_backward(dq, lddq, accumulate_dq, dk, dv, lddkv, accumulate_dkv, dout, lse, delta, x,
                  bf16);
  }
}

AttentionInputs packed_attention(Tensor qkv, int B, int NH, int KVH, int hs,
                                 const PositionRuns& runs, const int32_t* doc_start, int window) {
  AttentionInputs x;
  x.B = B;
  x.NH = NH;
  x.KVH = KVH;
  x.hs = hs;
  x.ldq = x.ldkv = int64_t(NH + 2 * KVH) * hs;
  x.q = qkv.data();
  x.k = x.q + int64_t(NH) * hs;
  x.v = x.k + int64_t(KVH) * hs;
  x.queries = x.keys = runs;
  x.doc_start = doc_start;
  x.window = window;
  return x;
}

void attention_forward(Tensor out, Tensor lse, Tensor qkv, int B, int T, int NH, int KVH, int hs,
                       const int32_t* doc_start) {
  attention_forward(out, lse,
                    packed_attention(qkv, B, NH, KVH, hs, PositionRuns::contiguous(T), doc_start));
}

void attention_backward_input(Tensor dqkv, Tensor delta, Tensor dout, Tensor qkv, Tensor out,
                              Tensor lse, int B, int T, int NH, int KVH, int hs,
                              const int32_t* doc_start) {
  const AttentionInputs x =
      packed_attention(qkv, B, NH, KVH, hs, PositionRuns::contiguous(T), doc_start);
  attention_backward_delta(delta, out, dout, B, T, NH, hs);
  float* dq = dqkv.data();
  attention_backward(dq, x.ldq, false, dq + int64_t(NH) * hs, dq + int64_t(NH + KVH) * hs, x.ldq,
                     false, dout, lse, delta, x);
}

int64_t attention_scratch_bytes(int NH, int KVH, int hs, int threads) {
  if (kDeviceMemory) return 0;
  const int64_t G = NH / KVH, hp = round_up(hs, backend::kTileCols);
  return std::max({host_forward_floats(G, hp), host_kv_floats(hp), host_q_floats(G, hp)}) *
         int64_t(sizeof(float)) * threads;
}

int64_t attention_bf16_bytes(int NH, int KVH, int hs, int B, int T, bool ring) {
  if (kDeviceMemory) return 0;
  // The backward's, the larger: Kᵀ, Vᵀ and K of each key tile, Q and dO twice of each query tile.
  const int64_t tiles = int64_t(B) * tile_count(PositionRuns::contiguous(T), kHostTile);
  const int64_t tile_pairs = int64_t(kHostTile) * round_up(hs, backend::kTileCols) / 2;
  const int64_t packed = (3 * int64_t(KVH) + 4 * int64_t(NH)) * tiles * tile_pairs;
  return packed * int64_t(sizeof(Bf16Pair)) +
         attention_stored_scores_bytes(NH, KVH, hs, B, T, true, ring);
}

int64_t attention_stored_scores_bytes(int NH, int KVH, int hs, int B, int T, bool bf16, bool ring) {
  if (kDeviceMemory) return 0;
  const int64_t n = tile_count(PositionRuns::contiguous(T), kHostTile);
  const int64_t words = score_tile_words(bf16) * 4 * (NH / KVH);
  // A group's key tiles' dK and dV, kept between ranges of its query tiles.
  const int64_t ranges = 2 * n * kHostTile * round_up(hs, backend::kTileCols) * 4;
  if (n * words > kStoredScoresBytes) return 0;  // not even one query tile's: none kept
  // Under CP a ring block's keys may all be seen, and its rows are some of T's: at most the cap.
  if (ring) return std::min(int64_t(B) * KVH * n * n * words, kStoredScoresBytes) + ranges;
  // A causal sequence's pairs of tiles, in slices of whole groups up to the cap where one
  // group's fits, else in ranges of its query tiles up to the cap.
  const int64_t group = n * (n + 1) / 2 * words;
  if (group > kStoredScoresBytes) return kStoredScoresBytes + ranges;
  return std::min(int64_t(B) * KVH, kStoredScoresBytes / group) * group;
}

int64_t set_attention_stored_scores(int64_t bytes) {
  return std::exchange(g_stored_scores_bytes, bytes);
}

int attention_tile(bool device, int hs) {
  return device ? device_tiles(1, hs).bk : kHostTile;
}

}  // namespace mpf
