// Branch-free exp and tanh, and row reductions in fixed lanes, so the loops that call them
// vectorize without -ffast-math (glibc's scalar expf/tanhf cost GELU alone ~0.2 s per GPT-2 124M
// step here) and give the same bits on every run and thread count.
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <cstring>

namespace mpf::vmath {

// e^x for x in float's range, within ~2 ulp: x = n·ln2 + r with |r| <= ln2/2, e^r by its Taylor
// series to r⁷ (truncation < 1e-8 relative), 2ⁿ built in the exponent bits. Inputs below -87
// give e^-87 (~1e-38) rather than denormals; above 88, e^88.
// Always inlined: in a large kernel (the one-pass classifier) GCC kept it out of line, and a call
// per element left the loop scalar (the classifier ran 8x slower).
KOKKOS_FORCEINLINE_FUNCTION float exp(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  // Round x·log2(e) to the nearest integer by the 1.5·2²³ shifter trick (no libm call).
  const float shifter = 12582912.0f;
  const float n = (x * 1.44269504088896341f + shifter) - shifter;
  const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187e-06f;  // ln2 in two parts
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// tanh(x) = 1 − 2/(e^{2x} + 1): absolute error ~1e-7, which is what GELU's 0.5·x·(1 + tanh)
// needs (its relative error stays ~1e-7).
KOKKOS_FORCEINLINE_FUNCTION float tanh(float x) {
  return 1.0f - 2.0f / (vmath::exp(2.0f * x) + 1.0f);
}

// Reductions over a row in kLanes independent partial results, combined in a fixed order.
inline constexpr int kLanes = 16;

// max g(i) for i in [0, n), n >= 1, in kLanes lanes.
template <class G>
KOKKOS_INLINE_FUNCTION float lane_max(int n, const G& g) {
  float lane[kLanes];
  const float first = g(0);
  for (int k = 0; k < kLanes; ++k) lane[k] = first;
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const float v = g(i + k);
      lane[k] = v > lane[k] ? v : lane[k];
    }
  }
  float m = first;
  for (int k = 0; k < kLanes; ++k) m = lane[k] > m ? lane[k] : m;
  for (; i < n; ++i) {
    const float v = g(i);
    m = v > m ? v : m;
  }
  return m;
}

// Σ f(i) for i in [0, n): a running sum in one register would chain every add on the one before
// (a latency-bound scalar loop); kLanes sums advance side by side and vectorize.
template <class F>
KOKKOS_INLINE_FUNCTION float lane_sum(int n, const F& f) {
  float lane[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) lane[k] += f(i + k);
  }
  float s = 0.0f;
  for (int k = 0; k < kLanes; ++k) s += lane[k];
  for (; i < n; ++i) s += f(i);
  return s;
}

KOKKOS_INLINE_FUNCTION float row_sum(const float* x, int n) {
  return lane_sum(n, [x](int i) { return x[i]; });
}

KOKKOS_INLINE_FUNCTION float row_max(const float* x, int n) {
  return lane_max(n, [x](int i) { return x[i]; });
}

// ---- many rows at once, on the host ------------------------------------------------------------
// row_max and row_sum of up to kLanes rows together (rows of n floats, n a multiple of kLanes, row
// stride ld; `rows` <= kLanes of them), with their bits. One row's last step folds its kLanes
// partial results one after another: 15 dependent scalar operations, which in a softmax over a
// 64-wide tile cost as much as the exponentials. Here the kLanes x kLanes block of partial results
// is transposed, and the fold runs across the rows in one vector, in the same order.
namespace rows_detail {
typedef float Lanes __attribute__((vector_size(kLanes * sizeof(float))));
typedef int32_t Index __attribute__((vector_size(kLanes * sizeof(int32_t))));

inline Lanes load(const float* p) {
  Lanes v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline Lanes max(Lanes a, Lanes b) {
  return b > a ? b : a;  // lane_max's select: the kept value stays on ties
}
// r[i] holds row i's lanes; after, r[k] holds lane k of every row. Four rounds: at each, the
// off-diagonal s x s blocks of every 2s x 2s block trade places.
inline void transpose(Lanes r[kLanes]) {
  for (int s = 1; s < kLanes; s *= 2) {
    Index keep, take;
    for (int l = 0; l < kLanes; ++l) {
      keep[l] = (l & s) ? kLanes + l - s : l;
      take[l] = (l & s) ? kLanes + l : l + s;
    }
    for (int i = 0; i < kLanes; ++i) {
      if (i & s) continue;
      const Lanes x = r[i], y = r[i + s];
      r[i] = __builtin_shuffle(x, y, keep);
      r[i + s] = __builtin_shuffle(x, y, take);
    }
  }
}
}  // namespace rows_detail

inline void rows_max(const float* x, int64_t ld, int n, int rows, float* out) {
  using namespace rows_detail;
  Lanes r[kLanes];
  for (int i = 0; i < kLanes; ++i) {
    const float* row = x + (i < rows ? i : 0) * ld;
    Lanes m = load(row);
    for (int j = kLanes; j < n; j += kLanes) m = max(m, load(row + j));
    r[i] = m;
  }
  transpose(r);
  Lanes m = r[0];
  for (int k = 1; k < kLanes; ++k) m = max(m, r[k]);  // max is exact: any order gives its bits
  for (int i = 0; i < rows; ++i) out[i] = m[i];
}

inline void rows_sum(const float* x, int64_t ld, int n, int rows, float* out) {
  using namespace rows_detail;
  Lanes r[kLanes];
  for (int i = 0; i < kLanes; ++i) {
    const float* row = x + (i < rows ? i : 0) * ld;
    Lanes s = Lanes{} + load(row);  // lane_sum's lanes: from zero, in order
    for (int j = kLanes; j < n; j += kLanes) s += load(row + j);
    r[i] = s;
  }
  transpose(r);
  Lanes s = Lanes{};
  for (int k = 0; k < kLanes; ++k) s += r[k];  // lane_sum's fold: lane 0 first
  for (int i = 0; i < rows; ++i) out[i] = s[i];
}

}  // namespace mpf::vmath
