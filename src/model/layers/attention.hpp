// Fused causal attention, FlashAttention-2's algorithm (Dao 2023): per query head h,
// S = Q_h·K_kvᵀ/√hs, P = softmax over the keys the query sees, out = P·V_kv, computed a tile of
// queries at a time against a tile of keys at a time with an online softmax, so that no (T × T)
// matrix exists anywhere. The forward saves only the output and each row's logsumexp; the
// backward recomputes P tile by tile from the logsumexp.
//
// Grouped-query attention (Ainslie et al. 2023): query head h reads kv head h / (NH/KVH), and a
// unit of work holds all G = NH/KVH query heads of one kv head, so each K/V tile is read once for
// the group. With KVH = NH it is GPT-2's multi-head attention. A query sees a key when the key's
// position is at most its own (causal) and, with document masking, at least the position where
// the query's document starts. Tiles wholly outside what their queries see are skipped, so
// causal attention does about half the work of the full matrix.
//
// Work is split so that every result is a sum in a fixed order, whatever runs it: the forward
// and dQ take a unit per (sequence, kv head, query tile), dK and dV one per (sequence, kv head,
// key tile), each recomputing P for its tiles (7 tile products in the backward, FlashAttention-2
// has 5 with atomic additions to dQ, which would make the bits depend on timing).
//
// Two launch shapes (core/parallel.hpp): on the CPU a unit per host thread, taken dynamically,
// its tile products through the register-blocked micro-kernel (backends/tile_gemm.hpp); on a GPU
// a Kokkos team per unit, with the K/V tiles in team scratch memory.
//
// Precision: in bf16 (matmul.hpp's Bf16Products scope) every operand of a tile product — Q, K,
// V, the output gradient, P and dS — is rounded to bf16 before the product, which accumulates in
// fp32, as the bf16 GEMMs do; the softmax, its statistics and the merges stay fp32.
#pragma once

#include <cstdint>

#include "core/types.hpp"
#include "model/positions.hpp"

namespace mpf {

// What one attention call reads. Rows are (B, rows) with the given row strides: query head h in
// columns h·hs.. of q, kv head j in columns j·hs.. of k and of v (the packed qkv's [Q | K | V]:
// k = q + NH·hs, v = k + KVH·hs, both strides (NH + 2·KVH)·hs).
struct AttentionInputs {
  int B = 1, NH = 1, KVH = 1, hs = 1;
  const float* q = nullptr;
  int64_t ldq = 0;
  PositionRuns queries;
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t ldkv = 0;
  PositionRuns keys;
  // (B, queries.rows): the position where each query's document starts, or null (no document
  // masking: a query sees every earlier key).
  const int32_t* doc_start = nullptr;
  // A sliding window: a query sees at most the last `window` positions, itself included (Mistral
  // v0.1); 0: no window. Tiles wholly outside it are skipped as the causal mask's are.
  int window = 0;
};

// out (B, queries.rows, NH·hs) and lse (B, NH, queries.rows), the logsumexp of each row's scaled
// scores. A row that sees no key gets out 0 and lse −∞. With merge, the call's partial result is
// combined with the (out, lse) already there by their logsumexps, as ring attention combines the
// blocks it visits: lse = log(e^lse₁ + e^lse₂), out = out₁·e^(lse₁−lse) + out₂·e^(lse₂−lse).
// row_max (B, NH, queries.rows), when given: each row's largest scaled logit q·k/√hs over the
// keys it sees, −∞ where it sees none; with merge, the larger of it and what is there (QK-clip
// reads it: optim/qk_clip.hpp).
void attention_forward(Tensor out, Tensor lse, const AttentionInputs& x, bool merge = false,
                       Tensor row_max = Tensor());

// head_max[h] = max(head_max[h], the largest row_max of head h over the B sequences' rows).
void fold_head_max(float* head_max, Tensor row_max, int B, int NH, int rows);

// delta (B, NH, rows) = Σ_d dout·out per row and head: the softmax backward's row term,
// FlashAttention-2's D. out and dout (B, rows, NH·hs).
void attention_backward_delta(Tensor delta, Tensor out, Tensor dout, int B, int rows, int NH,
                              int hs);

// The gradients of one call's inputs given the whole attention's lse and delta (which, under
// ring attention, cover every block visited): dq (rows of stride ldq, like q), dk and dv (rows
// of stride ldkv, like k and v). Each is written (=) unless its accumulate flag says add (+=).
// A KV head's dK and dV sum its group's query heads in ascending order.
void attention_backward(float* dq, int64_t lddq, bool accumulate_dq, float* dk, float* dv,
                        int64_t lddkv, bool accumulate_dkv, Tensor dout, Tensor lse, Tensor delta,
                        const AttentionInputs& x);

// The training model's call on a packed qkv (B,T,(NH + 2·KVH)·hs): causal within each sequence
// of T positions [pos0, pos0 + T) — or of `runs` — and, given doc_start (B,T), within documents.
AttentionInputs packed_attention(Tensor qkv, int B, int NH, int KVH, int hs,
                                 const PositionRuns& runs, const int32_t* doc_start = nullptr,
                                 int window = 0);
// out (B,T,NH·hs), lse (B,NH,T).
void attention_forward(Tensor out, Tensor lse, Tensor qkv, int B, int T, int NH, int KVH, int hs,
                       const int32_t* doc_start = nullptr);
// dqkv (B,T,(NH + 2·KVH)·hs) =; delta (B,NH,T) is scratch; dout (B,T,NH·hs); qkv, out and lse
// as the forward saw and left them.
void attention_backward_input(Tensor dqkv, Tensor delta, Tensor dout, Tensor qkv, Tensor out,
                              Tensor lse, int B, int T, int NH, int KVH, int hs,
                              const int32_t* doc_start = nullptr);

// The tile sizes the host and device shapes use (queries and keys per tile), for the tests.
int attention_tile(bool device_shape, int hs);
// The host shape's scratch over `threads` threads (kept between calls), for the memory plan.
int64_t attention_scratch_bytes(int NH, int KVH, int hs, int threads);
// The host shape's bf16 operands of a call on B sequences of T positions, packed once (kept
// between calls), for the memory plan.
int64_t attention_bf16_bytes(int NH, int KVH, int hs, int B, int T, bool ring);

// The bytes of dS the host shape's backward keeps between its dK/dV and dQ passes at most, at
// T (causal; ring: CP's blocks), fp32 or bf16 (attention_bf16_bytes includes it).
int64_t attention_stored_scores_bytes(int NH, int KVH, int hs, int B, int T, bool bf16, bool ring);
// The most bytes of dS the host shape's backward keeps between its passes (default 128 MiB, which
// attention_stored_scores_bytes counts; 0: none, the dQ pass computes dS again).
// Returns the previous limit. For tests, which check that every way gives the same bits.
int64_t set_attention_stored_scores(int64_t bytes);

}  // namespace mpf
