#include "model/layers/chunked_attention.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/transfer.hpp"
#include "model/layers/attention_masks.hpp"
#include "model/layers/matmul.hpp"

namespace mpf {

// Names here differ from attention.cpp's: a unity build compiles both files as one.
namespace {

using attn::kNegInf;

// Floats of scratch a call keeps: the forward's S (NH, Tc, Tk), partial out (Tc, NH·hs) and
// partial lse (NH, Tc) of a merge and 1/Σ of each row (NH, Tc); the backward's S and dP.
int64_t chunk_scratch_floats(int NH, int hs, int Tk, int Tc) {
  const int64_t scores = int64_t(NH) * Tc * Tk;
  return std::max(scores + int64_t(Tc) * NH * hs + 2 * int64_t(NH) * Tc, 2 * scores);
}

// The scratch, grown when a call needs more and kept (the model's layers share it), released
// when Kokkos finalizes.
float* chunk_scratch(int64_t floats) {
  static Slab buffer;
  static const bool hooked = (Kokkos::push_finalize_hook([] { buffer = {}; }), true);
  (void)hooked;
  if (int64_t(buffer.extent(0)) < floats) {
    buffer = {};
    buffer = Slab(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, "mpf::chunked_attention::scratch"), floats);
  }
  return buffer.data();
}

// The document starts where the key spans are worked out, on the host: the caller's, or a copy
// of them in a GPU build.
class HostDocs {
 public:
  explicit HostDocs(const AttentionInputs& x) : rows_(x.queries.rows) {
    if (!x.doc_start || !kDeviceMemory) {
      docs_ = x.doc_start;
      return;
    }
    copy_.resize(size_t(x.B) * size_t(rows_));
    copy_to_host(copy_.data(), x.doc_start, copy_.size() * sizeof(int32_t),
                 "d2h chunked attention's documents");
    docs_ = copy_.data();
  }
  const int32_t* of(int b) const { return docs_ ? docs_ + int64_t(b) * rows_ : nullptr; }

 private:
  int rows_;
  const int32_t* docs_ = nullptr;
  std::vector<int32_t> copy_;
};

constexpr int kSpanRows = 64;

// While alive, a bf16 call's inputs are rounded once (matmul.hpp's HeldOperand) instead of by
// every product that reads them: Q, K and V (one range when they share a buffer, as in the packed
// QKV; K with V where they interleave, as in ring attention's blocks; K and V apart are left to
// the products) and dO. In fp32 nothing.
class HeldInputs {
 public:
  explicit HeldInputs(const AttentionInputs& x, const float* dout = nullptr) {
    const int64_t q_span = (int64_t(x.B) * x.queries.rows - 1) * x.ldq + int64_t(x.NH) * x.hs,
                  kv_span = (int64_t(x.B) * x.keys.rows - 1) * x.ldkv + int64_t(x.KVH) * x.hs;
    Range q{x.q, x.q + q_span};
    const Range k{x.k, x.k + kv_span}, v{x.v, x.v + kv_span};
    // Overlapping ranges lie in one allocation; ranges apart may lie in two, and the memory
    // between them is nobody's.
    if (k.overlaps(v)) {
      const Range kv = k.with(v);
      if (q.overlaps(kv)) {
        q = q.with(kv);
      } else {
        kv_.emplace(kv.begin, kv.end - kv.begin);
      }
    }
    q_.emplace(q.begin, q.end - q.begin);
    if (dout) dout_.emplace(dout, int64_t(x.B) * x.queries.rows * x.NH * x.hs);
  }

 private:
  struct Range {
    const float *begin, *end;
    // Compared as addresses: the ranges may lie in different allocations.
    bool overlaps(const Range& o) const { return at(begin) < at(o.end) && at(o.begin) < at(end); }
    Range with(const Range& o) const {
      return {at(begin) < at(o.begin) ? begin : o.begin, at(end) > at(o.end) ? end : o.end};
    }
    static uintptr_t at(const float* p) { return reinterpret_cast<uintptr_t>(p); }
  };
  std::optional<HeldOperand> q_, kv_, dout_;
};

// Key rows [lo, hi) spanning every key some query of `chunk` sees (lo == hi: none). Keys in
// between that no query sees are masked by the row kernels.
struct KeySpan {
  int lo = 0, hi = 0;
};
KeySpan key_span(const AttentionInputs& x, const int32_t* doc, const attn::Tile& chunk) {
  int first = INT_MAX;
  for (int i = 0; i < chunk.n; ++i) {
    first = std::min(first, attn::first_key(doc, chunk.row + i, chunk.pos + i, x.window));
  }
  const int last = chunk.pos + chunk.n - 1;
  KeySpan s{INT_MAX, INT_MIN};
  for (int i = 0; i < x.keys.count; ++i) {
    const PositionRuns::Run& run = x.keys.run[i];
    const int a = std::max(first, run.pos), e = std::min(last, run.pos + run.len - 1);
    if (a > e) continue;
    s.lo = std::min(s.lo, run.row + a - run.pos);
    s.hi = std::max(s.hi, run.row + e - run.pos + 1);
  }
  if (s.lo >= s.hi) return {};
  // Widened to multiples of kSpanRows (the masks cover the extra keys), so the products take a
  // bounded set of shapes, which a library that builds a kernel per shape (oneDNN) keeps: spans
  // cut by documents would otherwise give a new shape almost every chunk.
  s.lo = s.lo / kSpanRows * kSpanRows;
  s.hi = std::min(x.keys.rows, (s.hi + kSpanRows - 1) / kSpanRows * kSpanRows);
  return s;
}

// An operand of the per-head products: head h = kvh·G + g starts at p + g·g_step + kvh·kv_step.
struct Heads {
  const float* p;
  int64_t ld, g_step, kv_step;
};

// One product per query head g of a group, each batched over the kv heads, the group's heads in
// ascending order (C += for every g when the heads of a group add into one C, as dK and dV do).
void head_products(Op op_a, Op op_b, int M, int N, int K, Heads a, Heads b, float beta, float* c,
                   int64_t ldc, int64_t c_g_step, int64_t c_kv_step, int G, int KVH) {
  for (int g = 0; g < G; ++g) {
    matmul_strided_batched(op_a, op_b, M, N, K, 1.0f, a.p + g * a.g_step, int(a.ld), a.kv_step,
                           b.p + g * b.g_step, int(b.ld), b.kv_step, beta, c + g * c_g_step,
                           int(ldc), c_kv_step, KVH);
  }
}

// A chunk of one sequence against its key span: what the row kernels need.
struct ChunkRows {
  attn::Tile q;        // the chunk's query rows and positions
  int k0 = 0, nk = 0;  // its key rows [k0, k0 + nk)
  PositionRuns keys;   // the keys' positions
  const int32_t* doc;  // the sequence's document starts (kernel memory), or null
  int window = 0;
  float scale = 1.0f;
  int G = 1, KVH = 1;
  // The head of the score matrix in `slot`: S and dP hold them slot-major, slot = g·KVH + kvh, so
  // the products of one query head g of every group (one batched call) read and write one
  // contiguous block, which a bf16 product rounds once.
  KOKKOS_INLINE_FUNCTION int head_of(int slot) const { return (slot % KVH) * G + slot / KVH; }
};

// What the row kernels need of chunk q of sequence b, over the keys of `span`.
ChunkRows rows_of_chunk(const AttentionInputs& x, int b, int Tq, const attn::Tile& q,
                        const KeySpan& span) {
  const int32_t* doc = x.doc_start ? x.doc_start + int64_t(b) * Tq : nullptr;
  return {q,
          span.lo,
          span.hi - span.lo,
          x.keys,
          doc,
          x.window,
          1.0f / std::sqrt(float(x.hs)),
          x.NH / x.KVH,
          x.KVH};
}

// The columns of a chunk's key span [k0, k0 + nk) that a query at qpos, first seeing the key at
// `first`, sees: an interval per run of key positions, so the row loops test two ranges (and
// vectorize) instead of looking each key's position up.
struct SeenColumns {
  int lo0 = 0, hi0 = 0, lo1 = 0, hi1 = 0;
  KOKKOS_INLINE_FUNCTION bool operator()(int j) const {
    return ((j >= lo0) & (j < hi0)) | ((j >= lo1) & (j < hi1));
  }
};
KOKKOS_INLINE_FUNCTION SeenColumns seen_columns(const ChunkRows& c, int r) {
  const int qpos = c.q.pos + r, first = attn::first_key(c.doc, c.q.row + r, qpos, c.window);
  int lo[2] = {0, 0}, hi[2] = {0, 0};
  for (int i = 0; i < c.keys.count; ++i) {
    const PositionRuns::Run& run = c.keys.run[i];
    const int a = first > run.pos ? first : run.pos,
              e = qpos < run.pos + run.len - 1 ? qpos : run.pos + run.len - 1;
    const int l = run.row + a - run.pos - c.k0, h = run.row + e - run.pos + 1 - c.k0;
    lo[i] = l > 0 ? l : 0;
    hi[i] = h < c.nk ? h : c.nk;
  }
  return {lo[0], hi[0], lo[1], hi[1]};
}

// S (NH slots, n, nk) = Q·Kᵀ becomes e^(scale·S − max) over the keys each row sees (0 elsewhere),
// in place: P before its normalisation, which the output takes instead (hs columns, not nk). Row
// r of head h has its logsumexp written to L[h·ldl + r] and 1/Σ to inv[h·n + r] (lse −∞ and inv 0
// for a row that sees no key).
void softmax_rows(float* S, int NH, const ChunkRows& c, float* L, int64_t ldl, float* inv) {
  const int n = c.q.n, nk = c.nk;
  for_rows(
      "mpf::chunked_attention_softmax", int64_t(NH) * n, nk,
      KOKKOS_LAMBDA(const Row& row, int64_t m) {
        const int h = c.head_of(int(m / n)), r = int(m % n);
        const SeenColumns seen = seen_columns(c, r);
        float* s = S + m * nk;
        // A row that sees no key has no maximum (a team's max then reduces to its identity, the
        // lowest float, not −∞): its sum, 0, tells. Otherwise the maximum's term is 1.
        const float mx = row.max(nk, [=](int j) { return seen(j) ? s[j] : kNegInf; });
        const float shift = c.scale * mx, scale = c.scale;
        const float sum = row.sum(nk, [=](int j) {
          const float e = seen(j) ? attn::exp_or_zero(scale * s[j] - shift) : 0.0f;
          s[j] = e;
          return e;
        });
        const bool any = sum > 0.0f;
        row.once([=] {
          L[h * ldl + r] = any ? shift + logf(sum) : kNegInf;
          inv[h * n + r] = any ? 1.0f / sum : 0.0f;
        });
      });
}

// S (NH slots, n, nk) = Q·Kᵀ and dP = dO·Vᵀ become P, recomputed from the saved lse, and
// dS = scale·P⊙(dP − delta), in place.
void backward_rows(float* S, float* dP, int NH, const ChunkRows& c, const float* L, const float* D,
                   int64_t ldl) {
  const int n = c.q.n, nk = c.nk;
  for_rows(
      "mpf::chunked_attention_backward_rows", int64_t(NH) * n, nk,
      KOKKOS_LAMBDA(const Row& row, int64_t m) {
        const int h = c.head_of(int(m / n)), r = int(m % n);
        const SeenColumns seen = seen_columns(c, r);
        const float l = L[h * ldl + r], d = D[h * ldl + r], scale = c.scale;
        float* s = S + m * nk;
        float* dp = dP + m * nk;
        // A row that sees no key anywhere (lse −∞) has P = 0 and no gradient.
        const bool any = l != kNegInf;
        row.for_each(nk, [=](int j) {
          const float p = any && seen(j) ? attn::exp_or_zero(scale * s[j] - l) : 0.0f;
          dp[j] = scale * p * (dp[j] - d);
          s[j] = p;
        });
      });
}

// out rows (n, ldo) and their lse (head h at L + h·ldl) of a chunk that sees no key.
void no_keys(float* out, int64_t ldo, float* L, int64_t ldl, int n, int NH, int hs) {
  for_rows(
      "mpf::chunked_attention_no_keys", int64_t(NH) * n, hs,
      KOKKOS_LAMBDA(const Row& row, int64_t m) {
        const int h = int(m / n), r = int(m % n);
        float* o = out + r * ldo + int64_t(h) * hs;
        row.for_each(hs, [=](int i) { o[i] = 0.0f; });
        if (L) row.once([=] { L[h * ldl + r] = kNegInf; });
      });
}

// The chunk's output rows (n, NH·hs; head h at column h·hs) from the unnormalised P·V in O: scaled
// by each row's 1/Σ (inv, (NH, n)) into out, or with merge combined with out and L by the
// logsumexps (the chunk's in Lp, (NH, n)).
void finish_rows(float* out, int64_t ldo, float* L, int64_t ldl, const float* O, const float* Lp,
                 const float* inv, bool merge, int n, int NH, int hs) {
  for_rows(
      "mpf::chunked_attention_output", int64_t(NH) * n, hs,
      KOKKOS_LAMBDA(const Row& row, int64_t m) {
        const int h = int(m / n), r = int(m % n);
        float* o = out + r * ldo + int64_t(h) * hs;
        const float* p = O + r * ldo + int64_t(h) * hs;
        if (!merge) {
          const float scale = inv[m];
          row.for_each(hs, [=](int i) { o[i] = p[i] * scale; });
          return;
        }
        const attn::Merged w = attn::merge_weights(L[h * ldl + r], Lp[m]);
        const float scale = w.w_new * inv[m];
        row.for_each(hs, [=](int i) { o[i] = w.w_old * o[i] + scale * p[i]; });
        row.once([=] { L[h * ldl + r] = w.lse; });
      });
}

void check_chunked(const AttentionInputs& x, int chunk_rows) {
  if (x.KVH < 1 || x.NH % x.KVH != 0 || x.hs < 1 || x.B < 1 || x.queries.count < 1 ||
      x.keys.count < 1 || chunk_rows < 1) {
    MPF_FATAL("chunked attention: bad shape (NH a multiple of KVH, at least one row and head)");
  }
}

// The chunk rows a call runs with: no more than the queries.
int effective_chunk(const AttentionInputs& x, int chunk_rows) {
  return std::max(1, std::min(chunk_rows, x.queries.rows));
}

}  // namespace

void chunked_attention_forward(Tensor out, Tensor lse, const AttentionInputs& x, bool merge,
                               int chunk_rows) {
  check_chunked(x, chunk_rows);
  const int Tc = effective_chunk(x, chunk_rows);
  const int NH = x.NH, KVH = x.KVH, G = NH / KVH, hs = x.hs, Tq = x.queries.rows, Tk = x.keys.rows;
  const int64_t ldo = int64_t(NH) * hs;
  float* S = chunk_scratch(chunk_scratch_floats(NH, hs, Tk, Tc));
  float* O = S + int64_t(NH) * Tc * Tk;  // a merge's partial out (n, NH·hs)
  float* Lp = O + int64_t(Tc) * ldo;     // and lse (NH, n)
  float* inv = Lp + int64_t(NH) * Tc;    // each row's 1/Σ (NH, n)
  const HostDocs docs(x);
  const HeldInputs held(x);
  const int chunks = attn::tile_count(x.queries, Tc);
  for (int b = 0; b < x.B; ++b) {
    for (int ci = 0; ci < chunks; ++ci) {
      const attn::Tile q = attn::tile_at(x.queries, Tc, ci);
      const KeySpan span = key_span(x, docs.of(b), q);
      const int n = q.n, nk = span.hi - span.lo;
      float* o = out.data() + (int64_t(b) * Tq + q.row) * ldo;
      float* L = lse.data() + int64_t(b) * NH * Tq + q.row;  // head h at L + h·Tq
      if (nk == 0) {
        if (!merge) no_keys(o, ldo, L, Tq, n, NH, hs);
        continue;
      }
      const ChunkRows c = rows_of_chunk(x, b, Tq, q, span);
      const float* qc = x.q + (int64_t(b) * Tq + q.row) * x.ldq;
      const int64_t kv_at = (int64_t(b) * Tk + span.lo) * x.ldkv;
      const int64_t per_head_scores = int64_t(n) * nk;
      head_products(Op::N, Op::T, n, nk, hs, {qc, x.ldq, hs, int64_t(G) * hs},
                    {x.k + kv_at, x.ldkv, 0, hs}, 0.0f, S, nk, KVH * per_head_scores,
                    per_head_scores, G, KVH);
      softmax_rows(S, NH, c, merge ? Lp : L, merge ? n : Tq, inv);
      head_products(Op::N, Op::N, n, hs, nk, {S, nk, KVH * per_head_scores, per_head_scores},
                    {x.v + kv_at, x.ldkv, 0, hs}, 0.0f, merge ? O : o, ldo, hs, int64_t(G) * hs, G,
                    KVH);
      finish_rows(o, ldo, L, Tq, merge ? O : o, Lp, inv, merge, n, NH, hs);
    }
  }
}

void chunked_attention_backward(float* dq, int64_t lddq, bool accumulate_dq, float* dk, float* dv,
                                int64_t lddkv, bool accumulate_dkv, Tensor dout, Tensor lse,
                                Tensor delta, const AttentionInputs& x, int chunk_rows) {
  check_chunked(x, chunk_rows);
  const int Tc = effective_chunk(x, chunk_rows);
  const int NH = x.NH, KVH = x.KVH, G = NH / KVH, hs = x.hs, Tq = x.queries.rows, Tk = x.keys.rows;
  const int64_t ldo = int64_t(NH) * hs, Ck = int64_t(KVH) * hs;
  // dK and dV add every chunk's share: they start from zero unless the caller's sum goes on.
  if (!accumulate_dkv) {
    for_each_2d(
        "mpf::chunked_attention_clear_dkv", int64_t(x.B) * Tk, int(Ck),
        KOKKOS_LAMBDA(int64_t r, int col) {
          dk[r * lddkv + col] = 0.0f;
          dv[r * lddkv + col] = 0.0f;
        });
  }
  float* S = chunk_scratch(chunk_scratch_floats(NH, hs, Tk, Tc));
  float* dP = S + int64_t(NH) * Tc * Tk;
  const HostDocs docs(x);
  const HeldInputs held(x, dout.data());
  const int chunks = attn::tile_count(x.queries, Tc);
  for (int b = 0; b < x.B; ++b) {
    for (int ci = 0; ci < chunks; ++ci) {
      const attn::Tile q = attn::tile_at(x.queries, Tc, ci);
      const KeySpan span = key_span(x, docs.of(b), q);
      const int n = q.n, nk = span.hi - span.lo;
      float* dqc = dq + (int64_t(b) * Tq + q.row) * lddq;
      if (nk == 0) {
        if (!accumulate_dq) no_keys(dqc, lddq, nullptr, 0, n, NH, hs);
        continue;
      }
      const ChunkRows c = rows_of_chunk(x, b, Tq, q, span);
      const float* qc = x.q + (int64_t(b) * Tq + q.row) * x.ldq;
      const float* dout_rows = dout.data() + (int64_t(b) * Tq + q.row) * ldo;
      const int64_t kv_at = (int64_t(b) * Tk + span.lo) * x.ldkv,
                    dkv_at = (int64_t(b) * Tk + span.lo) * lddkv;
      const int64_t sc = int64_t(n) * nk;  // a head's scores
      const Heads Q{qc, x.ldq, hs, int64_t(G) * hs}, dO{dout_rows, ldo, hs, int64_t(G) * hs},
          K{x.k + kv_at, x.ldkv, 0, hs}, V{x.v + kv_at, x.ldkv, 0, hs}, P{S, nk, KVH * sc, sc},
          dS{dP, nk, KVH * sc, sc};
      head_products(Op::N, Op::T, n, nk, hs, Q, K, 0.0f, S, nk, KVH * sc, sc, G, KVH);
      head_products(Op::N, Op::T, n, nk, hs, dO, V, 0.0f, dP, nk, KVH * sc, sc, G, KVH);
      backward_rows(S, dP, NH, c, lse.data() + int64_t(b) * NH * Tq + q.row,
                    delta.data() + int64_t(b) * NH * Tq + q.row, Tq);
      head_products(Op::N, Op::N, n, hs, nk, dS, K, accumulate_dq ? 1.0f : 0.0f, dqc, lddq, hs,
                    int64_t(G) * hs, G, KVH);
      head_products(Op::T, Op::N, nk, hs, n, dS, Q, 1.0f, dk + dkv_at, lddkv, 0, hs, G, KVH);
      head_products(Op::T, Op::N, nk, hs, n, P, dO, 1.0f, dv + dkv_at, lddkv, 0, hs, G, KVH);
    }
  }
}

int64_t chunked_attention_bf16_bytes(int NH, int KVH, int hs, int64_t rows, bool ring) {
  const int64_t qkv = int64_t(NH + 2 * KVH) * hs, q = int64_t(NH) * hs, kv = 2 * int64_t(KVH) * hs;
  return rows * (qkv + q + (ring ? kv : 0)) * int64_t(sizeof(bf16));
}

int64_t chunked_attention_scratch_bytes(int NH, int hs, int key_rows, int chunk_rows) {
  const int Tc = std::max(1, std::min(chunk_rows, key_rows));
  return chunk_scratch_floats(NH, hs, key_rows, Tc) * int64_t(sizeof(float));
}

}  // namespace mpf
