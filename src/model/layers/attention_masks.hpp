// What a query sees, shared by both attention paths (the fused kernel, attention.cpp, and the
// chunked one through the GEMM seam, chunked_attention.cpp): tiles of consecutive positions, the
// causal / document / sliding-window mask, and the merge of two partial results by their
// logsumexps. Host and device code alike.
#pragma once

#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/vector_math.hpp"
#include "model/positions.hpp"

namespace mpf::attn {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Local rows [row, row + n) of a sequence, at positions [pos, pos + n).
struct Tile {
  int row = 0, pos = 0, n = 0;
};

// Tiles of `size` rows over each run in turn (a tile never spans two runs, so its positions are
// consecutive).
KOKKOS_INLINE_FUNCTION int tile_count(const PositionRuns& r, int size) {
  int n = 0;
  for (int i = 0; i < r.count; ++i) n += (r.run[i].len + size - 1) / size;
  return n;
}

KOKKOS_INLINE_FUNCTION Tile tile_at(const PositionRuns& r, int size, int index) {
  for (int i = 0; i < r.count; ++i) {
    const int n = (r.run[i].len + size - 1) / size;
    if (index < n) {
      const int offset = index * size, left = r.run[i].len - offset;
      return {r.run[i].row + offset, r.run[i].pos + offset, left < size ? left : size};
    }
    index -= n;
  }
  return {};
}

// What a query at qpos, whose first visible key is at `first`, sees: keys at first..qpos.
KOKKOS_INLINE_FUNCTION bool sees(int qpos, int first, int kpos) {
  return kpos <= qpos && kpos >= first;
}

// The first key the query at `row` (position qpos) sees: its document's start (0 without
// document masking), or within a sliding window of `window` positions (0: none) the key
// window − 1 before it, whichever is later.
KOKKOS_INLINE_FUNCTION int first_key(const int32_t* doc, int row, int qpos, int window) {
  const int start = doc ? int(doc[row]) : 0, oldest = qpos - window + 1;
  return window > 0 && oldest > start ? oldest : start;
}

// e^x, and exactly 0 for the masked scores (x = −∞) and for x < −87, where e^x < 2e-38 and would
// be a denormal: a select, not a branch, so the row loops vectorize.
KOKKOS_INLINE_FUNCTION float exp_or_zero(float x) {
  const float e = vmath::exp(x);
  return x < -87.0f ? 0.0f : e;
}

// lse and out of two partial results merged by their logsumexps (either may be −∞: no keys).
struct Merged {
  float lse, w_old, w_new;
};
KOKKOS_INLINE_FUNCTION Merged merge_weights(float lse_old, float lse_new) {
  if (lse_old == kNegInf) return {lse_new, 0.0f, 1.0f};
  if (lse_new == kNegInf) return {lse_old, 1.0f, 0.0f};
  const float mx = lse_old > lse_new ? lse_old : lse_new;
  const float a = vmath::exp(lse_old - mx), b = vmath::exp(lse_new - mx), s = a + b;
  return {mx + logf(s), a / s, b / s};
}

}  // namespace mpf::attn
