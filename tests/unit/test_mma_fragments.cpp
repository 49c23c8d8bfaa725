// The tensor-core attention's indexing, checked on the CPU (backends/cuda/mma_fragments.hpp,
// flash_attention_mma_tile.hpp): a host emulation of one warp — 32 lanes' register arrays,
// fragments loaded from row-major tiles with the layout functions, one m16n8k16 product done in
// fp32 on the gathered matrices and scattered back — runs (a) an ownership check: every element
// of A, B and C/D is held by exactly one (lane, element), with spots from the PTX ISA's figures;
// (b) a 64 x 64 tile product; (c) the CUDA kernel's forward loop, step for step: scores a
// key tile at a time, causal, document and window masks, the online softmax with each row's max
// reduced across its quad by emulated xor shuffles and its sum kept per lane, P reused from the
// score registers as A. (b) and (c) against plain loops within fp32 rounding; (c) again with P
// rounded to bf16 as the kernel rounds it; (d) the backward's two kernels, dK and dV a key
// block at a time with Pᵀ and dSᵀ reused as A, dQ a query block at a time with dS reused as A,
// against the gradients in double, with P and dS in fp32 and in bf16. What this cannot check — that
// the hardware lays the fragments out as these functions say — a GPU checks
// (tests/gpu/test_mma_attention.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <vector>

#include "backends/cuda/flash_attention_mma_tile.hpp"
#include "backends/cuda/mma_fragments.hpp"
#include "core/bf16.hpp"

namespace {

using namespace mpf::mma;

float round_bf16(float x) {
  return mpf::from_bf16(mpf::to_bf16(x));
}

std::vector<float> random_bf16(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = round_bf16(dist(gen));
  return v;
}

// One warp's m16n8k16: A, B and C gathered from the lanes by the layout, D = A·B + C accumulated
// in fp32, scattered back to the lanes' d. a(lane, i), b(lane, i) give values, d(lane, i) a
// float&.
template <class D, class A, class B>
void warp_mma(D&& d, A&& a, B&& b) {
  float am[kM][kK], bm[kK][kN], cm[kM][kN];
  for (int lane = 0; lane < kWarp; ++lane) {
    for (int i = 0; i < kAElems; ++i) am[a_row(lane, i)][a_col(lane, i)] = a(lane, i);
    for (int i = 0; i < kBElems; ++i) bm[b_row(lane, i)][b_col(lane, i)] = b(lane, i);
    for (int i = 0; i < kCElems; ++i) cm[c_row(lane, i)][c_col(lane, i)] = d(lane, i);
  }
  for (int r = 0; r < kM; ++r)
    for (int c = 0; c < kN; ++c) {
      float acc = cm[r][c];
      for (int k = 0; k < kK; ++k) acc += am[r][k] * bm[k][c];
      cm[r][c] = acc;
    }
  for (int lane = 0; lane < kWarp; ++lane)
    for (int i = 0; i < kCElems; ++i) d(lane, i) = cm[c_row(lane, i)][c_col(lane, i)];
}

// __shfl_xor_sync over the warp: every lane reads its partner's value from before the step.
void shuffle_xor_max(std::array<std::array<float, 2>, kWarp>& v, int step) {
  const auto before = v;
  for (int lane = 0; lane < kWarp; ++lane)
    for (int r = 0; r < 2; ++r) v[lane][r] = std::max(v[lane][r], before[lane ^ step][r]);
}
void shuffle_xor_sum(std::array<std::array<float, 2>, kWarp>& v, int step) {
  const auto before = v;
  for (int lane = 0; lane < kWarp; ++lane)
    for (int r = 0; r < 2; ++r) v[lane][r] += before[lane ^ step][r];
}

template <class Row, class Col>
void expect_each_once(int rows, int cols, int elems, Row row, Col col, const char* what) {
  std::vector<int> held(rows * cols, 0);
  for (int lane = 0; lane < kWarp; ++lane)
    for (int i = 0; i < elems; ++i) {
      const int r = row(lane, i), c = col(lane, i);
      ASSERT_TRUE(r >= 0 && r < rows && c >= 0 && c < cols) << what << " lane " << lane << " " << i;
      ++held[r * cols + c];
    }
  for (int e = 0; e < rows * cols; ++e)
    EXPECT_EQ(held[e], 1) << what << " (" << e / cols << ", " << e % cols << ")";
}

TEST(MmaFragments, EveryElementHeldByExactlyOneLaneRegister) {
  expect_each_once(kM, kK, kAElems, a_row, a_col, "A");
  expect_each_once(kK, kN, kBElems, b_row, b_col, "B");
  expect_each_once(kM, kN, kCElems, c_row, c_col, "C");
  // Spots from the PTX ISA's figures (m16n8k16, .bf16 A and B, .f32 C): lane 0 and lane 5
  // (group 1, second of its quad).
  EXPECT_EQ(a_row(0, 0), 0);
  EXPECT_EQ(a_col(0, 0), 0);
  EXPECT_EQ(a_row(0, 3), 8);
  EXPECT_EQ(a_col(0, 3), 1);
  EXPECT_EQ(a_row(0, 6), 8);
  EXPECT_EQ(a_col(0, 6), 8);
  EXPECT_EQ(a_row(5, 0), 1);
  EXPECT_EQ(a_col(5, 0), 2);
  EXPECT_EQ(a_col(5, 5), 11);
  EXPECT_EQ(b_row(5, 0), 2);
  EXPECT_EQ(b_row(5, 3), 11);
  EXPECT_EQ(b_col(5, 3), 1);
  EXPECT_EQ(c_row(5, 2), 9);
  EXPECT_EQ(c_col(5, 1), 3);
  EXPECT_EQ(c_row(31, 3), 15);
  EXPECT_EQ(c_col(31, 3), 7);
  for (int lane = 0; lane < kWarp; ++lane) {
    // The kernel's 32-bit loads: A's elements 2r, 2r + 1 are row neighbours, B's k neighbours.
    for (int r = 0; r < kAElems / 2; ++r) {
      EXPECT_EQ(a_row(lane, 2 * r + 1), a_row(lane, 2 * r));
      EXPECT_EQ(a_col(lane, 2 * r + 1), a_col(lane, 2 * r) + 1);
    }
    for (int r = 0; r < kBElems / 2; ++r) {
      EXPECT_EQ(b_col(lane, 2 * r + 1), b_col(lane, 2 * r));
      EXPECT_EQ(b_row(lane, 2 * r + 1), b_row(lane, 2 * r) + 1);
    }
    // A row's values sit in its quad only, which the two xor shuffles reduce over.
    for (int i = 0; i < kCElems; ++i)
      for (int step : {1, 2, 3}) EXPECT_EQ(c_row(lane ^ step, i), c_row(lane, i));
    // P·V's A from the scores' C: the same lane holds the same (row, column).
    for (int i = 0; i < kAElems; ++i) {
      EXPECT_EQ(a_row(lane, i), c_row(lane, c_index_for_a(i)));
      EXPECT_EQ(a_col(lane, i), kN * c_tile_for_a(i) + c_col(lane, c_index_for_a(i)));
    }
  }
}

TEST(MmaFragments, EmulatedTileProductEqualsPlainLoops) {
  constexpr int n = 64;
  const auto a = random_bf16(n * n, 1), b = random_bf16(n * n, 2);
  std::vector<float> c(n * n, 0.0f);
  for (int mt = 0; mt < n; mt += kM)
    for (int nt = 0; nt < n; nt += kN) {
      std::array<std::array<float, kCElems>, kWarp> d{};
      for (int kt = 0; kt < n; kt += kK)
        warp_mma(
            [&](int lane, int i) -> float& { return d[lane][i]; },
            [&](int lane, int i) { return a[(mt + a_row(lane, i)) * n + kt + a_col(lane, i)]; },
            [&](int lane, int i) { return b[(kt + b_row(lane, i)) * n + nt + b_col(lane, i)]; });
      for (int lane = 0; lane < kWarp; ++lane)
        for (int i = 0; i < kCElems; ++i)
          c[(mt + c_row(lane, i)) * n + nt + c_col(lane, i)] = d[lane][i];
    }
  for (int r = 0; r < n; ++r)
    for (int col = 0; col < n; ++col) {
      double want = 0.0, size = 0.0;
      for (int k = 0; k < n; ++k) {
        want += double(a[r * n + k]) * b[k * n + col];
        size += std::fabs(double(a[r * n + k]) * b[k * n + col]);
      }
      ASSERT_NEAR(c[r * n + col], want, 1e-6 * size) << r << ", " << col;
    }
}

// What a block of the kernel sees: T rows of queries and keys of one (sequence, head) at the
// given positions, document starts (or 0) and window.
struct Problem {
  int T = 0;
  std::vector<float> q, k, v;  // (T, hs), bf16 values
  std::vector<int> pos, doc;
  int window = 0;
};

// The kernel's position_range: the smallest and largest position of rows [first, first + 64).
std::pair<int, int> position_range(const Problem& p, int first) {
  int lo = 1 << 30, hi = -(1 << 30);
  for (int r = first; r < std::min(first + 64, p.T); ++r) {
    lo = std::min(lo, p.pos[r]);
    hi = std::max(hi, p.pos[r]);
  }
  return {lo, hi};
}

// The kernel's key_tile_seen: whether a query at positions q_lo..q_hi sees a key of the tile at k0.
bool key_tile_seen(const Problem& p, int k0, int q_lo, int q_hi) {
  bool useful = false;
  for (int u = k0; u < std::min(k0 + 64, p.T); ++u)
    useful |= p.pos[u] <= q_hi && (p.window == 0 || q_lo - p.pos[u] < p.window);
  return useful;
}

// The kernel's forward (flash_attention_mma.cu) on emulated warps: blocks of 64 queries, 4 warps
// of 16, key tiles of 64, the same skipping, masks, fragment loads and softmax steps.
template <int HS>
void emulated_forward(const Problem& p, bool round_p, std::vector<float>& out,
                      std::vector<float>& lse) {
  constexpr int kRows = 64, kKeys = 64, NT = kKeys / kN, DT = HS / kN;
  const float scale = 1.0f / std::sqrt(float(HS)) * kLog2e;
  out.assign(size_t(p.T) * HS, NAN);
  lse.assign(p.T, NAN);
  auto at = [&](const std::vector<float>& x, int row, int col) {
    return row < p.T ? x[size_t(row) * HS + col] : 0.0f;  // rows past T load as zeros
  };
  for (int q0 = 0; q0 < p.T; q0 += kRows) {
    const auto [q_lo, q_hi] = position_range(p, q0);
    for (int warp = 0; warp < kRows / kM; ++warp) {
      const int row0 = q0 + warp * kM;
      struct Lane {
        float o[DT][kCElems] = {};
        float s[NT][kCElems] = {};
        float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
      };
      std::vector<Lane> lanes(kWarp);
      for (int k0 = 0; k0 < p.T; k0 += kKeys) {
        if (!key_tile_seen(p, k0, q_lo, q_hi)) continue;
        for (auto& lane : lanes)
          for (auto& tile : lane.s)
            for (float& x : tile) x = 0.0f;
        for (int kk = 0; kk < HS; kk += kK)
          for (int j = 0; j < NT; ++j)
            warp_mma([&](int lane, int i) -> float& { return lanes[lane].s[j][i]; },
                     [&](int lane, int i) {
                       return at(p.q, row0 + a_row(lane, i), kk + a_col(lane, i));
                     },
                     [&](int lane, int i) {  // B(k, n) = K[n][k]
                       return at(p.k, k0 + j * kN + b_col(lane, i), kk + b_row(lane, i));
                     });
        std::array<std::array<float, 2>, kWarp> mx;
        for (int lane = 0; lane < kWarp; ++lane) {
          auto& s = lanes[lane].s;
          for (int j = 0; j < NT; ++j)
            for (int i = 0; i < kCElems; ++i) {
              const int t = row0 + c_row(lane, i), key = k0 + j * kN + c_col(lane, i);
              const bool seen =
                  t < p.T && key < p.T && key_visible(p.pos[t], p.pos[key], p.doc[t], p.window);
              s[j][i] = seen ? s[j][i] * scale : -INFINITY;
            }
          float m2[2];
          row_max_partial(s, m2);
          mx[lane] = {m2[0], m2[1]};
        }
        shuffle_xor_max(mx, 1);
        shuffle_xor_max(mx, 2);
        for (int lane = 0; lane < kWarp; ++lane) {
          const float m2[2] = {mx[lane][0], mx[lane][1]};
          row_softmax_step(lanes[lane].s, m2, lanes[lane].m, lanes[lane].l, lanes[lane].o);
        }
        for (int kk = 0; kk < kKeys / kK; ++kk)
          for (int d = 0; d < DT; ++d)
            warp_mma([&](int lane, int i) -> float& { return lanes[lane].o[d][i]; },
                     [&](int lane, int i) {
                       const float x = lanes[lane].s[2 * kk + c_tile_for_a(i)][c_index_for_a(i)];
                       return round_p ? round_bf16(x) : x;
                     },
                     [&](int lane, int i) {  // B(k, n) = V[k][n]
                       return at(p.v, k0 + kk * kK + b_row(lane, i), d * kN + b_col(lane, i));
                     });
      }
      std::array<std::array<float, 2>, kWarp> l;
      for (int lane = 0; lane < kWarp; ++lane) l[lane] = {lanes[lane].l[0], lanes[lane].l[1]};
      shuffle_xor_sum(l, 1);
      shuffle_xor_sum(l, 2);
      for (int lane = 0; lane < kWarp; ++lane)
        for (int r = 0; r < 2; ++r) {
          const int t = row0 + c_row(lane, 2 * r);
          if (t >= p.T) continue;
          float inv, row_lse;
          row_finish(lanes[lane].m[r], l[lane][r], inv, row_lse);
          for (int d = 0; d < DT; ++d)
            for (int i = 2 * r; i < 2 * r + 2; ++i)
              out[size_t(t) * HS + d * kN + c_col(lane, i)] = lanes[lane].o[d][i] * inv;
          if (quad_lane_of(lane) == 0) lse[t] = row_lse;
        }
    }
  }
}

// Plain loops in double: softmax over the keys a query sees, written from the masks' definitions.
void reference_forward(const Problem& p, int hs, std::vector<double>& out,
                       std::vector<double>& lse) {
  out.assign(size_t(p.T) * hs, 0.0);
  lse.assign(p.T, -INFINITY);
  for (int t = 0; t < p.T; ++t) {
    std::vector<double> s(p.T, -INFINITY);
    double mx = -INFINITY;
    for (int u = 0; u < p.T; ++u) {
      const int qp = p.pos[t], kp = p.pos[u];
      if (kp > qp || kp < p.doc[t] || (p.window > 0 && qp - kp >= p.window)) continue;
      double dot = 0.0;
      for (int d = 0; d < hs; ++d) dot += double(p.q[t * hs + d]) * p.k[u * hs + d];
      s[u] = dot / std::sqrt(double(hs));
      mx = std::max(mx, s[u]);
    }
    if (mx == -INFINITY) continue;
    double sum = 0.0;
    for (int u = 0; u < p.T; ++u) sum += std::exp(s[u] - mx);
    for (int u = 0; u < p.T; ++u) {
      const double w = std::exp(s[u] - mx) / sum;
      for (int d = 0; d < hs; ++d) out[t * hs + d] += w * p.v[u * hs + d];
    }
    lse[t] = mx + std::log(sum);
  }
}

Problem make_problem(int T, int hs, uint32_t seed) {
  Problem p;
  p.T = T;
  p.q = random_bf16(size_t(T) * hs, seed, 2.0f);
  p.k = random_bf16(size_t(T) * hs, seed + 1, 2.0f);
  p.v = random_bf16(size_t(T) * hs, seed + 2);
  p.pos.resize(T);
  for (int t = 0; t < T; ++t) p.pos[t] = t;
  p.doc.assign(T, 0);
  return p;
}

template <int HS>
void expect_forward_matches(const Problem& p, const char* what) {
  std::vector<double> want, want_lse;
  reference_forward(p, HS, want, want_lse);
  for (bool round_p : {false, true}) {
    std::vector<float> got, got_lse;
    emulated_forward<HS>(p, round_p, got, got_lse);
    // fp32 rounding; with P in bf16 (8 bits), its relative rounding of 2^-9 per weight.
    const double tol = round_p ? 4e-3 : 2e-5;
    double err = 0.0, size = 0.0;
    for (size_t e = 0; e < want.size(); ++e) {
      ASSERT_FALSE(std::isnan(got[e])) << what << " element " << e;
      err = std::max(err, std::fabs(got[e] - want[e]));
      size = std::max(size, std::fabs(want[e]));
    }
    EXPECT_LE(err, tol * size) << what << (round_p ? ", P in bf16" : ", P in fp32");
    for (int t = 0; t < p.T; ++t) {
      if (std::isinf(want_lse[t])) {
        EXPECT_TRUE(std::isinf(got_lse[t]) && got_lse[t] < 0) << what << " row " << t;
      } else {
        EXPECT_NEAR(got_lse[t], want_lse[t], 2e-5 * std::max(1.0, std::fabs(want_lse[t])))
            << what << " row " << t;
      }
    }
  }
}

TEST(MmaFragments, EmulatedForwardTileLoopEqualsPlainAttention) {
  // 150 rows: 3 query blocks and key tiles, the last partial; causal skipping of whole tiles.
  expect_forward_matches<64>(make_problem(150, 64, 10), "causal, hs 64");
  expect_forward_matches<128>(make_problem(80, 128, 20), "causal, hs 128");
  // Documents (one starting mid-tile), a window, and context parallelism's two runs of rows
  // (positions 0..39 then 120..159): rows that see few keys and tiles skipped by position.
  Problem p = make_problem(80, 64, 30);
  for (int t = 0; t < p.T; ++t) {
    p.pos[t] = t < 40 ? t : 80 + t;
    p.doc[t] = p.pos[t] >= 130 ? 130 : p.pos[t] >= 25 ? 25 : 0;
  }
  expect_forward_matches<64>(p, "documents, two runs");
  p.window = 17;
  expect_forward_matches<64>(p, "documents, two runs, window 17");
}

// The attention's gradients in double from the definitions: P as reference_forward's, delta_t =
// Σ_d dO·O, dS = P·(dO·v − delta), dQ = Σ_u dS·k/√hs, dK = Σ_t dS·q/√hs, dV = Σ_t P·dO.
struct Gradients {
  std::vector<double> dq, dk, dv, delta;
};
Gradients reference_backward(const Problem& p, int hs, const std::vector<float>& dout) {
  std::vector<double> out, lse;
  reference_forward(p, hs, out, lse);
  Gradients g;
  g.dq.assign(size_t(p.T) * hs, 0.0);
  g.dk.assign(size_t(p.T) * hs, 0.0);
  g.dv.assign(size_t(p.T) * hs, 0.0);
  g.delta.assign(p.T, 0.0);
  const double scale = 1.0 / std::sqrt(double(hs));
  for (int t = 0; t < p.T; ++t) {
    for (int d = 0; d < hs; ++d) g.delta[t] += double(dout[t * hs + d]) * out[t * hs + d];
    if (std::isinf(lse[t])) continue;
    for (int u = 0; u < p.T; ++u) {
      const int qp = p.pos[t], kp = p.pos[u];
      if (kp > qp || kp < p.doc[t] || (p.window > 0 && qp - kp >= p.window)) continue;
      double s = 0.0, dp = 0.0;
      for (int d = 0; d < hs; ++d) {
        s += double(p.q[t * hs + d]) * p.k[u * hs + d];
        dp += double(dout[t * hs + d]) * p.v[u * hs + d];
      }
      const double prob = std::exp(s * scale - lse[t]), ds = prob * (dp - g.delta[t]);
      for (int d = 0; d < hs; ++d) {
        g.dv[u * hs + d] += prob * dout[t * hs + d];
        g.dq[t * hs + d] += ds * scale * p.k[u * hs + d];
        g.dk[u * hs + d] += ds * scale * p.q[t * hs + d];
      }
    }
  }
  return g;
}

// c(lane)[j] += A·B_jᵀ over HS columns on an emulated warp, as the kernel's rows_times_rows: A's
// 16 rows a(row, col), B_j the rows 8j..8j + 7 of b(row, col).
template <int HS, int NT, class C, class A, class B>
void emulated_rows_times_rows(C&& c, A&& a, B&& b) {
  for (int kk = 0; kk < HS; kk += kK)
    for (int j = 0; j < NT; ++j)
      warp_mma([&](int lane, int i) -> float& { return c(lane)[j][i]; },
               [&](int lane, int i) { return a(a_row(lane, i), kk + a_col(lane, i)); },
               [&](int lane, int i) { return b(j * kN + b_col(lane, i), kk + b_row(lane, i)); });
}

// The backward kernels (flash_attention_mma.cu) on emulated warps. dK and dV: blocks of 64 keys,
// 4 warps of 16, query tiles of 64 skipped as the kernel skips them, Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ,
// backward_element, Pᵀ and dSᵀ reused from the registers as A. dQ: blocks of 64 queries, key
// tiles as the forward's, dS reused as A. lse and delta are given (the forward's and
// attention_backward_delta's); round: P, dS (and the inputs, already bf16 values) as the kernel
// rounds them.
template <int HS>
void emulated_backward(const Problem& p, const std::vector<float>& dout,
                       const std::vector<float>& lse, const std::vector<float>& delta, bool round,
                       std::vector<float>& dq, std::vector<float>& dk, std::vector<float>& dv) {
  constexpr int kRows = 64, kKeys = 64, DT = HS / kN;
  const float scale = 1.0f / std::sqrt(float(HS));
  auto at = [&](const std::vector<float>& x, int row, int col) {
    return row < p.T ? x[size_t(row) * HS + col] : 0.0f;
  };
  auto rounded = [&](float x) { return round ? round_bf16(x) : x; };
  dq.assign(size_t(p.T) * HS, NAN);
  dk.assign(size_t(p.T) * HS, NAN);
  dv.assign(size_t(p.T) * HS, NAN);
  struct Lane {
    float a[DT][kCElems] = {}, b[DT][kCElems] = {};  // dK and dV, or dQ
    float s[kRows / kN][kCElems] = {}, dp[kRows / kN][kCElems] = {};
  };
  // A new tile's scores (and dP) start from zero; the gradients accumulate across tiles.
  auto clear_scores = [](std::vector<Lane>& lanes) {
    for (Lane& lane : lanes) {
      for (auto& tile : lane.s)
        for (float& x : tile) x = 0.0f;
      for (auto& tile : lane.dp)
        for (float& x : tile) x = 0.0f;
    }
  };
  for (int k0 = 0; k0 < p.T; k0 += kKeys) {
    const auto [k_lo, k_hi] = position_range(p, k0);
    for (int warp = 0; warp < kKeys / kM; ++warp) {
      const int key0 = k0 + warp * kM;
      std::vector<Lane> lanes(kWarp);
      for (int q0 = 0; q0 < p.T; q0 += kRows) {
        bool useful = false;
        for (int t = q0; t < std::min(q0 + kRows, p.T); ++t)
          useful |= p.pos[t] >= k_lo && (p.window == 0 || p.pos[t] - k_hi < p.window);
        if (!useful) continue;
        clear_scores(lanes);
        // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ, the keys as rows.
        emulated_rows_times_rows<HS, kRows / kN>(
            [&](int lane) -> auto& { return lanes[lane].s; },
            [&](int r, int c) { return at(p.k, key0 + r, c); },
            [&](int r, int c) { return at(p.q, q0 + r, c); });
        emulated_rows_times_rows<HS, kRows / kN>(
            [&](int lane) -> auto& { return lanes[lane].dp; },
            [&](int r, int c) { return at(p.v, key0 + r, c); },
            [&](int r, int c) { return rounded(at(dout, q0 + r, c)); });
        for (int lane = 0; lane < kWarp; ++lane)
          for (int j = 0; j < kRows / kN; ++j)
            for (int i = 0; i < kCElems; ++i) {
              const int key = key0 + c_row(lane, i), t = q0 + j * kN + c_col(lane, i);
              const bool seen =
                  key < p.T && t < p.T && key_visible(p.pos[t], p.pos[key], p.doc[t], p.window);
              float prob, ds;
              backward_element(lanes[lane].s[j][i], lanes[lane].dp[j][i],
                               t < p.T ? lse[t] : -INFINITY, t < p.T ? delta[t] : 0.0f, scale, seen,
                               prob, ds);
              lanes[lane].s[j][i] = prob;
              lanes[lane].dp[j][i] = ds;
            }
        for (int kk = 0; kk < kRows / kK; ++kk)
          for (int d = 0; d < DT; ++d) {
            auto a_of = [&](auto& c) {
              return [&](int lane, int i) {
                return rounded(c(lane)[2 * kk + c_tile_for_a(i)][c_index_for_a(i)]);
              };
            };
            auto s_of = [&](int lane) -> auto& {
              return lanes[lane].s;
            };
            auto dp_of = [&](int lane) -> auto& {
              return lanes[lane].dp;
            };
            warp_mma(
                [&](int lane, int i) -> float& { return lanes[lane].b[d][i]; }, a_of(s_of),
                [&](int lane, int i) {  // B(k, n) = dO[k][n]
                  return rounded(at(dout, q0 + kk * kK + b_row(lane, i), d * kN + b_col(lane, i)));
                });
            warp_mma([&](int lane, int i) -> float& { return lanes[lane].a[d][i]; }, a_of(dp_of),
                     [&](int lane, int i) {  // B(k, n) = Q[k][n]
                       return at(p.q, q0 + kk * kK + b_row(lane, i), d * kN + b_col(lane, i));
                     });
          }
      }
      for (int lane = 0; lane < kWarp; ++lane)
        for (int d = 0; d < DT; ++d)
          for (int i = 0; i < kCElems; ++i) {
            const int key = key0 + c_row(lane, i);
            if (key >= p.T) continue;
            dk[size_t(key) * HS + d * kN + c_col(lane, i)] = lanes[lane].a[d][i];
            dv[size_t(key) * HS + d * kN + c_col(lane, i)] = lanes[lane].b[d][i];
          }
    }
  }
  for (int q0 = 0; q0 < p.T; q0 += kRows) {
    const auto [q_lo, q_hi] = position_range(p, q0);
    for (int warp = 0; warp < kRows / kM; ++warp) {
      const int row0 = q0 + warp * kM;
      std::vector<Lane> lanes(kWarp);
      for (int k0 = 0; k0 < p.T; k0 += kKeys) {
        if (!key_tile_seen(p, k0, q_lo, q_hi)) continue;
        clear_scores(lanes);
        // S = Q·Kᵀ and dP = dO·Vᵀ.
        emulated_rows_times_rows<HS, kKeys / kN>(
            [&](int lane) -> auto& { return lanes[lane].s; },
            [&](int r, int c) { return at(p.q, row0 + r, c); },
            [&](int r, int c) { return at(p.k, k0 + r, c); });
        emulated_rows_times_rows<HS, kKeys / kN>(
            [&](int lane) -> auto& { return lanes[lane].dp; },
            [&](int r, int c) { return rounded(at(dout, row0 + r, c)); },
            [&](int r, int c) { return at(p.v, k0 + r, c); });
        for (int lane = 0; lane < kWarp; ++lane)
          for (int j = 0; j < kKeys / kN; ++j)
            for (int i = 0; i < kCElems; ++i) {
              const int t = row0 + c_row(lane, i), key = k0 + j * kN + c_col(lane, i);
              const bool seen =
                  t < p.T && key < p.T && key_visible(p.pos[t], p.pos[key], p.doc[t], p.window);
              float prob, ds;
              backward_element(lanes[lane].s[j][i], lanes[lane].dp[j][i],
                               t < p.T ? lse[t] : -INFINITY, t < p.T ? delta[t] : 0.0f, scale, seen,
                               prob, ds);
              lanes[lane].s[j][i] = ds;
            }
        for (int kk = 0; kk < kKeys / kK; ++kk)
          for (int d = 0; d < DT; ++d)
            warp_mma([&](int lane, int i) -> float& { return lanes[lane].a[d][i]; },
                     [&](int lane, int i) {
                       return rounded(lanes[lane].s[2 * kk + c_tile_for_a(i)][c_index_for_a(i)]);
                     },
                     [&](int lane, int i) {  // B(k, n) = K[k][n]
                       return at(p.k, k0 + kk * kK + b_row(lane, i), d * kN + b_col(lane, i));
                     });
      }
      for (int lane = 0; lane < kWarp; ++lane)
        for (int d = 0; d < DT; ++d)
          for (int i = 0; i < kCElems; ++i) {
            const int t = row0 + c_row(lane, i);
            if (t < p.T) dq[size_t(t) * HS + d * kN + c_col(lane, i)] = lanes[lane].a[d][i];
          }
    }
  }
}

template <int HS>
void expect_backward_matches(const Problem& p, const char* what) {
  const auto dout = random_bf16(size_t(p.T) * HS, 77);
  const Gradients want = reference_backward(p, HS, dout);
  std::vector<double> out, lse64;
  reference_forward(p, HS, out, lse64);
  const std::vector<float> lse(lse64.begin(), lse64.end()),
      delta(want.delta.begin(), want.delta.end());
  for (bool round : {false, true}) {
    std::vector<float> dq, dk, dv;
    emulated_backward<HS>(p, dout, lse, delta, round, dq, dk, dv);
    // fp32 rounding; with P and dS in bf16, their relative 2^-9 per term.
    const double tol = round ? 1e-2 : 1e-4;
    const std::pair<const char*, std::pair<const std::vector<float>*, const std::vector<double>*>>
        pairs[] = {{"dq", {&dq, &want.dq}}, {"dk", {&dk, &want.dk}}, {"dv", {&dv, &want.dv}}};
    for (const auto& [name, gw] : pairs) {
      const auto& got = *gw.first;
      const auto& ref = *gw.second;
      double err = 0.0, size = 0.0;
      for (size_t e = 0; e < ref.size(); ++e) {
        ASSERT_FALSE(std::isnan(got[e])) << what << " " << name << " element " << e;
        err = std::max(err, std::fabs(got[e] - ref[e]));
        size = std::max(size, std::fabs(ref[e]));
      }
      EXPECT_GT(size, 0.0) << what << " " << name;
      EXPECT_LE(err, tol * size) << what << " " << name << (round ? ", bf16" : ", fp32");
    }
  }
}

TEST(MmaFragments, EmulatedBackwardEqualsPlainGradients) {
  // 150 rows: key and query blocks of 64, the last partial; causal skipping both ways.
  expect_backward_matches<64>(make_problem(150, 64, 40), "causal, hs 64");
  expect_backward_matches<128>(make_problem(80, 128, 50), "causal, hs 128");
  Problem p = make_problem(80, 64, 60);
  for (int t = 0; t < p.T; ++t) {
    p.pos[t] = t < 40 ? t : 80 + t;
    p.doc[t] = p.pos[t] >= 130 ? 130 : p.pos[t] >= 25 ? 25 : 0;
  }
  expect_backward_matches<64>(p, "documents, two runs");
  p.window = 17;
  expect_backward_matches<64>(p, "documents, two runs, window 17");
}

}  // namespace
