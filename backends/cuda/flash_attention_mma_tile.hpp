// The per-lane steps of FlashAttention-2's forward (and the backward's recomputed elements) on
// m16n8k16 fragments, shared by the CUDA
// kernel (flash_attention_mma.cu) and the host emulation of a warp that tests them
// (tests/unit/test_mma_fragments.cpp). A warp owns 16 query rows; a lane holds two of them, rows
// group and group + 8 (r = 0, 1: C elements 2r and 2r + 1), and of every 8-key score tile and
// 8-wide output tile the two columns mma_fragments.hpp gives it. Scores are in log2 units (the
// scale times log2 e), so exp2 is the exponential. A row's max is reduced across its 4 lanes
// (shuffles lane ^ 1, lane ^ 2) before row_softmax_step; its sum stays a per-lane partial, as
// FlashAttention-2 keeps it, and is reduced once at the end.
#pragma once

#include <cmath>

#include "backends/cuda/mma_fragments.hpp"

namespace mpf::mma {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Whether a query at position qpos sees a key at kpos: causal, within its document (doc_start:
// where the query's document starts; 0 without documents) and, with a window, among its last
// `window` positions.
MPF_MMA_HD constexpr bool key_visible(int qpos, int kpos, int doc_start, int window) {
  return kpos <= qpos && kpos >= doc_start && (window == 0 || qpos - kpos < window);
}

// The lane's maxima of its two rows over NT score tiles of 8 keys.
template <int NT>
MPF_MMA_HD inline void row_max_partial(const float (&s)[NT][kCElems], float (&mx)[2]) {
  mx[0] = mx[1] = -INFINITY;
  for (int j = 0; j < NT; ++j)
    for (int i = 0; i < kCElems; ++i) mx[i >> 1] = fmaxf(mx[i >> 1], s[j][i]);
}

// With mx the rows' maxima over this key tile (reduced across the quad): the running max m moves
// up, the partial sum l and the output o (DT tiles of 8 dimensions) are rescaled to it, and the
// scores s become the probabilities p = 2^(s − m). A row that has seen no key yet (m = −∞) keeps
// p = 0 and no NaN.
template <int NT, int DT>
MPF_MMA_HD inline void row_softmax_step(float (&s)[NT][kCElems], const float (&mx)[2],
                                        float (&m)[2], float (&l)[2], float (&o)[DT][kCElems]) {
  float base[2];
  for (int r = 0; r < 2; ++r) {
    const float m_new = fmaxf(m[r], mx[r]);
    base[r] = m_new == -INFINITY ? 0.0f : m_new;
    const float alpha = exp2f(m[r] - base[r]);
    m[r] = m_new;
    l[r] *= alpha;
    for (int d = 0; d < DT; ++d) {
      o[d][2 * r] *= alpha;
      o[d][2 * r + 1] *= alpha;
    }
  }
  for (int j = 0; j < NT; ++j)
    for (int i = 0; i < kCElems; ++i) {
      const float p = exp2f(s[j][i] - base[i >> 1]);
      s[j][i] = p;
      l[i >> 1] += p;
    }
}

// A row's end, with l its sum over the quad: the factor for its outputs and its logsumexp in
// natural-log units of the scaled scores (a row that saw no key: 0 and −∞).
MPF_MMA_HD inline void row_finish(float m, float l, float& inv, float& lse) {
  if (l > 0.0f) {
    inv = 1.0f / l;
    lse = (m + log2f(l)) * kLn2;
  } else {
    inv = 0.0f;
    lse = -INFINITY;
  }
}

// The backward's element of a recomputed tile, as the portable kernel's backward computes it:
// the probability p = e^(scale·s − lse) where the query sees the key (0 elsewhere, and in a row
// that saw no key), and the score's gradient ds = scale·p·(dp − delta), with dp the element of
// dO·Vᵀ and delta the row's Σ dO·O. Natural-log units here: scale = 1/√hs, lse as the forward
// wrote it.
MPF_MMA_HD inline void backward_element(float s, float dp, float lse, float delta, float scale,
                                        bool seen, float& p, float& ds) {
  p = seen && lse != -INFINITY ? expf(scale * s - lse) : 0.0f;
  ds = scale * p * (dp - delta);
}

}  // namespace mpf::mma
