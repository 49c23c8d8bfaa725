// The fused attention (model/layers/attention.hpp) in both launch shapes: its output, logsumexps
// and input gradients against plain float64 loops and against the unfused path it replaced; the
// grouped-query ratios 1, 2, 4 and 8; sequences shorter than a tile and not a multiple of one; a
// head size the micro-kernel pads; document masks; ring attention's pieces (keys visited a block
// at a time, merged by their logsumexps, context parallelism's two-chunk rows); bf16; the same
// bits at any thread count; and finite differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backends/gemm.hpp"
#include "core/bf16.hpp"
#include "core/parallel.hpp"
#include "core/transfer.hpp"
#include "model/layers/attention.hpp"
#include "model/layers/matmul.hpp"
#include "test_helpers.hpp"
#include "unfused_attention.hpp"
#ifdef _OPENMP
#include <omp.h>
#endif

namespace mpf {

using test::random_slab;
using test::to_host;
using test::view;

namespace {

Slab from_host(const char* name, const std::vector<float>& v) {
  Slab s(std::string(name), v.size());
  copy_from_host(s.data(), v.data(), v.size() * sizeof(float), "test");
  return s;
}

Kokkos::View<int32_t*, MemSpace> ints_from_host(const std::vector<int32_t>& v) {
  Kokkos::View<int32_t*, MemSpace> t("test::ints", v.size());
  copy_from_host(t.data(), v.data(), v.size() * sizeof(int32_t), "test");
  return t;
}

// max |got − want| over max |want|.
double relative_error(const std::vector<float>& got, const std::vector<double>& want) {
  EXPECT_EQ(got.size(), want.size());
  double err = 0.0, scale = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(got[i])) return INFINITY;
    err = std::max(err, std::fabs(got[i] - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  return err / std::max(scale, 1e-30);
}

std::vector<uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

double round_bf16(double x) {
  return from_bf16(to_bf16(float(x)));
}

// Attention in float64 on a packed qkv (B, T, (NH + 2·KVH)·hs), queries and keys the same rows,
// at the positions `runs` gives, within documents when doc is not empty (B·T starts): out, lse
// and, for the output gradient dy, dqkv. With bf16, Q, K, V and dy are rounded first.
struct Reference {
  std::vector<double> y, lse, dqkv;
};
Reference reference(std::vector<float> qkv, std::vector<float> dy, int B, int NH, int KVH, int hs,
                    const PositionRuns& runs, const std::vector<int32_t>& doc, bool bf16 = false,
                    int window = 0) {
  const int T = runs.rows, G = NH / KVH, W = (NH + 2 * KVH) * hs, Cq = NH * hs;
  if (bf16) {
    for (float& x : qkv) x = float(round_bf16(x));
    for (float& x : dy) x = float(round_bf16(x));
  }
  const double scale = 1.0 / std::sqrt(double(hs));
  Reference r{std::vector<double>(size_t(B) * T * Cq, 0.0),
              std::vector<double>(size_t(B) * NH * T, -INFINITY),
              std::vector<double>(size_t(B) * T * W, 0.0)};
  auto at = [&](int b, int t, int col) { return double(qkv[(size_t(b) * T + t) * W + col]); };
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const int qc = h * hs, kc = (NH + h / G) * hs, vc = (NH + KVH + h / G) * hs;
      for (int t = 0; t < T; ++t) {
        const int qpos = runs.position(t), doc_first = doc.empty() ? 0 : doc[size_t(b) * T + t];
        const int first = window > 0 ? std::max(doc_first, qpos - window + 1) : doc_first;
        std::vector<double> p(T, 0.0);
        std::vector<bool> seen(T, false);
        double mx = -INFINITY, total = 0;
        for (int j = 0; j < T; ++j) {
          const int kpos = runs.position(j);
          if (kpos > qpos || kpos < first) continue;
          seen[j] = true;
          double dot = 0;
          for (int k = 0; k < hs; ++k) dot += at(b, t, qc + k) * at(b, j, kc + k);
          p[j] = dot * scale;
          mx = std::max(mx, p[j]);
        }
        if (mx == -INFINITY) continue;  // sees nothing: out 0, lse −∞, no gradient
        for (int j = 0; j < T; ++j) total += seen[j] ? (p[j] = std::exp(p[j] - mx)) : 0.0;
        for (int j = 0; j < T; ++j) p[j] = seen[j] ? p[j] / total : 0.0;
        r.lse[(size_t(b) * NH + h) * T + t] = mx + std::log(total);
        std::vector<double> dp(T, 0.0);
        double dot = 0;
        for (int k = 0; k < hs; ++k) {
          const double g = dy[(size_t(b) * T + t) * Cq + qc + k];
          double acc = 0;
          for (int j = 0; j < T; ++j) {
            acc += p[j] * at(b, j, vc + k);
            dp[j] += g * at(b, j, vc + k);
            r.dqkv[(size_t(b) * T + j) * W + vc + k] += p[j] * g;
          }
          r.y[(size_t(b) * T + t) * Cq + qc + k] = acc;
        }
        for (int j = 0; j < T; ++j) dot += p[j] * dp[j];
        for (int j = 0; j < T; ++j) {
          const double ds = scale * p[j] * (dp[j] - dot);
          for (int k = 0; k < hs; ++k) {
            r.dqkv[(size_t(b) * T + t) * W + qc + k] += ds * at(b, j, kc + k);
            r.dqkv[(size_t(b) * T + j) * W + kc + k] += ds * at(b, t, qc + k);
          }
        }
      }
    }
  }
  return r;
}

// The lse rows a test compares: those that see at least one key (−∞ compares as equal).
void expect_lse(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] == -INFINITY) {
      EXPECT_EQ(got[i], -INFINITY) << "lse " << i;
    } else {
      EXPECT_NEAR(got[i], want[i], tol * (1.0 + std::fabs(want[i]))) << "lse " << i;
    }
  }
}

struct Result {
  std::vector<float> out, lse, dqkv;
};

// The fused kernel's forward and backward on qkv with output gradient dy.
Result fused(const Slab& qkv, const Slab& dy, int B, int NH, int KVH, int hs,
             const PositionRuns& runs, const std::vector<int32_t>& doc, int window = 0) {
  const int T = runs.rows, W = (NH + 2 * KVH) * hs;
  Slab out("out", int64_t(B) * T * NH * hs), lse("lse", int64_t(B) * NH * T),
      delta("delta", int64_t(B) * NH * T), dqkv("dqkv", int64_t(B) * T * W);
  Kokkos::View<int32_t*, MemSpace> starts;
  if (!doc.empty()) starts = ints_from_host(doc);
  const AttentionInputs x = packed_attention(view(qkv), B, NH, KVH, hs, runs,
                                             doc.empty() ? nullptr : starts.data(), window);
  attention_forward(view(out), view(lse), x);
  attention_backward_delta(view(delta), view(out), view(dy), B, T, NH, hs);
  float* dq = dqkv.data();
  attention_backward(dq, W, false, dq + NH * hs, dq + (NH + KVH) * hs, W, false, view(dy),
                     view(lse), view(delta), x);
  return {to_host(out), to_host(lse), to_host(dqkv)};
}

// Documents of random lengths (1 to 9 positions) in every sequence, as --doc-mask finds them.
std::vector<int32_t> random_documents(int B, int T, uint64_t seed) {
  std::vector<int32_t> doc(size_t(B) * T);
  for (int b = 0; b < B; ++b) {
    int start = 0, next = 0;
    for (int t = 0; t < T; ++t) {
      if (t == next) {
        start = t;
        next = t + 1 + int(rng::uniform(seed, uint64_t(b), uint64_t(t)) * 9);
      }
      doc[size_t(b) * T + t] = start;
    }
  }
  return doc;
}

class Attention : public ::testing::TestWithParam<KernelShape> {
 protected:
  void SetUp() override {
    before_ = kernel_shape();
    set_kernel_shape(GetParam());
  }
  void TearDown() override { set_kernel_shape(before_); }

 private:
  KernelShape before_ = KernelShape::kHost;
};

}  // namespace

// Against float64 loops: T shorter than a tile, over one and not a multiple of one; every
// grouped-query ratio from 1 (multi-head) to 8; a head size the host micro-kernel pads.
TEST_P(Attention, MatchesFloat64) {
  struct Case {
    int B, T, NH, KVH, hs;
  };
  for (const Case c : {Case{2, 19, 4, 4, 8}, Case{1, 70, 8, 4, 24}, Case{1, 150, 8, 2, 16},
                       Case{1, 131, 8, 1, 16}, Case{2, 67, 2, 2, 64}}) {
    SCOPED_TRACE("B " + std::to_string(c.B) + " T " + std::to_string(c.T) + " NH " +
                 std::to_string(c.NH) + " KVH " + std::to_string(c.KVH) + " hs " +
                 std::to_string(c.hs));
    const int W = (c.NH + 2 * c.KVH) * c.hs;
    const Slab qkv = random_slab("qkv", int64_t(c.B) * c.T * W),
               dy = random_slab("dy", int64_t(c.B) * c.T * c.NH * c.hs);
    const PositionRuns runs = PositionRuns::contiguous(c.T);
    const Result got = fused(qkv, dy, c.B, c.NH, c.KVH, c.hs, runs, {});
    const Reference want = reference(to_host(qkv), to_host(dy), c.B, c.NH, c.KVH, c.hs, runs, {});
    EXPECT_LT(relative_error(got.out, want.y), 1e-5);
    expect_lse(got.lse, want.lse, 1e-5);
    EXPECT_LT(relative_error(got.dqkv, want.dqkv), 1e-5);
  }
}

// Document masking: a query sees only its own document's earlier keys; a document of one token
// sees itself.
TEST_P(Attention, DocumentMask) {
  for (const int KVH : {4, 1}) {
    const int B = 2, T = 140, NH = 4, hs = 16, W = (NH + 2 * KVH) * hs;
    const Slab qkv = random_slab("qkv", int64_t(B) * T * W),
               dy = random_slab("dy", int64_t(B) * T * NH * hs);
    const std::vector<int32_t> doc = random_documents(B, T, 11);
    const PositionRuns runs = PositionRuns::contiguous(T);
    const Result got = fused(qkv, dy, B, NH, KVH, hs, runs, doc);
    const Reference want = reference(to_host(qkv), to_host(dy), B, NH, KVH, hs, runs, doc);
    EXPECT_LT(relative_error(got.out, want.y), 1e-5) << "KVH " << KVH;
    expect_lse(got.lse, want.lse, 1e-5);
    EXPECT_LT(relative_error(got.dqkv, want.dqkv), 1e-5) << "KVH " << KVH;
  }
}

// A sliding window (Mistral v0.1): a query sees the last `window` positions, itself included, and
// with documents the later of its document's start and the window's; windows of one position,
// within a tile, across tiles and wider than the sequence.
TEST_P(Attention, SlidingWindow) {
  for (const int KVH : {4, 1}) {
    for (const int window : {1, 7, 64, 100, 500}) {
      for (const bool documents : {false, true}) {
        SCOPED_TRACE("KVH " + std::to_string(KVH) + " window " + std::to_string(window) +
                     (documents ? " documents" : ""));
        const int B = 2, T = 140, NH = 4, hs = 16, W = (NH + 2 * KVH) * hs;
        const Slab qkv = random_slab("qkv", int64_t(B) * T * W),
                   dy = random_slab("dy", int64_t(B) * T * NH * hs);
        const std::vector<int32_t> doc =
            documents ? random_documents(B, T, 3) : std::vector<int32_t>{};
        const PositionRuns runs = PositionRuns::contiguous(T);
        const Result got = fused(qkv, dy, B, NH, KVH, hs, runs, doc, window);
        const Reference want =
            reference(to_host(qkv), to_host(dy), B, NH, KVH, hs, runs, doc, false, window);
        EXPECT_LT(relative_error(got.out, want.y), 1e-5);
        expect_lse(got.lse, want.lse, 1e-5);
        EXPECT_LT(relative_error(got.dqkv, want.dqkv), 1e-5);
      }
    }
  }
}

// The path it replaced, in fp32 and in bf16 (whose products the unfused path runs through the
// backend's bf16 GEMM): in bf16 both round the same operands, but P computed in another order
// crosses a bf16 rounding boundary now and then (2⁻⁸ of an element), hence the looser bound.
TEST_P(Attention, EqualsTheUnfusedPath) {
  const int B = 2, T = 90, NH = 6, KVH = 2, hs = 32, W = (NH + 2 * KVH) * hs, Cq = NH * hs;
  const Slab qkv = random_slab("qkv", int64_t(B) * T * W), dy = random_slab("dy", B * T * Cq);
  for (const bool bf16 : {false, true}) {
    if (bf16 && !backend::kernels().bf16_missing.empty()) {
      std::printf("note: the bf16 comparison is skipped: %s\n",
                  backend::kernels().bf16_missing.c_str());
      continue;
    }
    Slab out("out", B * T * Cq), att("att", int64_t(B) * NH * T * T), datt("datt", B * NH * T * T),
        dqkv("dqkv", B * T * W);
    const PositionRuns runs = PositionRuns::contiguous(T);
    Result got;
    {
      std::unique_ptr<Bf16Products> scope;
      if (bf16)
        scope = std::make_unique<Bf16Products>(nullptr, nullptr, 0, int64_t(B) * NH * T * T);
      got = fused(qkv, dy, B, NH, KVH, hs, runs, {});
      test::unfused_attention_forward(view(out), view(att), view(qkv), B, T, NH, KVH, hs);
      test::unfused_attention_backward_input(view(dqkv), view(datt), view(dy), view(qkv), view(att),
                                             B, T, NH, KVH, hs);
    }
    const std::vector<float> y = to_host(out), d = to_host(dqkv);
    const double tol = bf16 ? 2e-2 : 1e-5;
    EXPECT_LT(relative_error(got.out, std::vector<double>(y.begin(), y.end())), tol) << bf16;
    EXPECT_LT(relative_error(got.dqkv, std::vector<double>(d.begin(), d.end())), tol) << bf16;
  }
}

// bf16 against float64 on the rounded inputs: the kernel's own roundings of P and dS (2⁻⁸ each,
// averaging out over a row) are all that is left.
TEST_P(Attention, Bf16RoundsItsOperands) {
  const int B = 1, T = 100, NH = 4, KVH = 2, hs = 32, W = (NH + 2 * KVH) * hs;
  const Slab qkv = random_slab("qkv", B * T * W), dy = random_slab("dy", B * T * NH * hs);
  const PositionRuns runs = PositionRuns::contiguous(T);
  Result got;
  {
    const Bf16Products scope(nullptr, nullptr, 0, 1);
    got = fused(qkv, dy, B, NH, KVH, hs, runs, {});
  }
  const Result fp32 = fused(qkv, dy, B, NH, KVH, hs, runs, {});
  const Reference want = reference(to_host(qkv), to_host(dy), B, NH, KVH, hs, runs, {}, true);
  const double out_err = relative_error(got.out, want.y),
               d_err = relative_error(got.dqkv, want.dqkv);
  EXPECT_LT(out_err, 1e-2);
  EXPECT_LT(d_err, 2e-2);
  // And it is bf16: the fp32 run is much closer to the unrounded reference.
  const Reference exact = reference(to_host(qkv), to_host(dy), B, NH, KVH, hs, runs, {});
  EXPECT_LT(relative_error(fp32.out, exact.y), 1e-5);
  EXPECT_GT(relative_error(got.out, exact.y), 1e-4);
}

// Ring attention's pieces. A rank holding context parallelism's chunks i and 2N−1−i of a
// sequence (N = 2: chunks 0 and 3, then 1 and 2) attends over each rank's keys in turn, merging
// the partial results by their logsumexps; the backward, given the whole attention's lse, adds
// each block's dQ and writes each block's dK and dV. Together: the whole sequence's attention.
TEST_P(Attention, KeysVisitedABlockAtATimeMerge) {
  for (const bool documents : {false, true}) {
    const int B = 2, chunk = 37, N = 2, T = 2 * N * chunk, NH = 4, KVH = 2, hs = 16;
    const int W = (NH + 2 * KVH) * hs, Cq = NH * hs, Ck = KVH * hs;
    const Slab qkv = random_slab("qkv", int64_t(B) * T * W), dy = random_slab("dy", B * T * Cq);
    const std::vector<int32_t> doc = documents ? random_documents(B, T, 5) : std::vector<int32_t>{};
    const PositionRuns whole = PositionRuns::contiguous(T);
    const Reference want = reference(to_host(qkv), to_host(dy), B, NH, KVH, hs, whole, doc);
    const std::vector<float> all = to_host(qkv), all_dy = to_host(dy);
    std::vector<double> got_y(want.y.size()), got_lse(want.lse.size()), got_d(want.dqkv.size());
    // Rank r's rows: chunk r then chunk 2N−1−r, each sequence's, and their document starts.
    auto rows_of = [&](int r) {
      return PositionRuns::two(chunk, r * chunk, (2 * N - 1 - r) * chunk);
    };
    auto take = [&](const std::vector<float>& src, int r, int width) {
      const PositionRuns p = rows_of(r);
      std::vector<float> v(size_t(B) * p.rows * width);
      for (int b = 0; b < B; ++b) {
        for (int t = 0; t < p.rows; ++t) {
          std::copy_n(&src[(size_t(b) * T + p.position(t)) * width], width,
                      &v[(size_t(b) * p.rows + t) * width]);
        }
      }
      return v;
    };
    std::vector<Slab> local_qkv, local_dy;
    std::vector<Kokkos::View<int32_t*, MemSpace>> local_doc;
    for (int r = 0; r < N; ++r) {
      local_qkv.push_back(from_host("local_qkv", take(all, r, W)));
      local_dy.push_back(from_host("local_dy", take(all_dy, r, Cq)));
      if (documents) {
        const PositionRuns p = rows_of(r);
        std::vector<int32_t> d(size_t(B) * p.rows);
        for (int b = 0; b < B; ++b) {
          for (int t = 0; t < p.rows; ++t)
            d[size_t(b) * p.rows + t] = doc[size_t(b) * T + p.position(t)];
        }
        local_doc.push_back(ints_from_host(d));
      }
    }
    const int rows = 2 * chunk;
    std::vector<Slab> dkv;  // each rank's dK and dV, (B, rows, 2·Ck), summed over the visits
    for (int r = 0; r < N; ++r) dkv.emplace_back("dkv", int64_t(B) * rows * 2 * Ck);
    for (int r = 0; r < N; ++r) {
      Slab out("out", int64_t(B) * rows * Cq), lse("lse", int64_t(B) * NH * rows),
          delta("delta", int64_t(B) * NH * rows), dq("dq", int64_t(B) * rows * Cq);
      auto inputs = [&](int owner) {  // rank r's queries against rank owner's keys
        AttentionInputs x = packed_attention(view(local_qkv[size_t(r)]), B, NH, KVH, hs, rows_of(r),
                                             documents ? local_doc[size_t(r)].data() : nullptr);
        const float* kv = local_qkv[size_t(owner)].data();
        x.k = kv + Cq;
        x.v = kv + Cq + Ck;
        x.keys = rows_of(owner);
        return x;
      };
      // The ring's order from rank r: its own block first, then r−1, r−2, ...
      for (int step = 0; step < N; ++step) {
        attention_forward(view(out), view(lse), inputs((r - step + N) % N), step > 0);
      }
      attention_backward_delta(view(delta), view(out), view(local_dy[size_t(r)]), B, rows, NH, hs);
      for (int step = 0; step < N; ++step) {
        const int owner = (r - step + N) % N;
        float* d = dkv[size_t(owner)].data();
        attention_backward(dq.data(), Cq, step > 0, d, d + Ck, 2 * Ck, true,
                           view(local_dy[size_t(r)]), view(lse), view(delta), inputs(owner));
      }
      const PositionRuns p = rows_of(r);
      const std::vector<float> y = to_host(out), l = to_host(lse), g = to_host(dq);
      for (int b = 0; b < B; ++b) {
        for (int t = 0; t < p.rows; ++t) {
          const size_t whole_row = size_t(b) * T + p.position(t), local = size_t(b) * rows + t;
          for (int c = 0; c < Cq; ++c) {
            got_y[whole_row * Cq + c] = y[local * Cq + c];
            got_d[whole_row * W + c] = g[local * Cq + c];
          }
          for (int h = 0; h < NH; ++h) {
            got_lse[(size_t(b) * NH + h) * T + p.position(t)] = l[(size_t(b) * NH + h) * rows + t];
          }
        }
      }
    }
    for (int r = 0; r < N; ++r) {
      const PositionRuns p = rows_of(r);
      const std::vector<float> d = to_host(dkv[size_t(r)]);
      for (int b = 0; b < B; ++b) {
        for (int t = 0; t < p.rows; ++t) {
          const size_t whole_row = size_t(b) * T + p.position(t), local = size_t(b) * rows + t;
          for (int c = 0; c < 2 * Ck; ++c) got_d[whole_row * W + Cq + c] = d[local * 2 * Ck + c];
        }
      }
    }
    auto as_float = [](const std::vector<double>& v) {
      return std::vector<float>(v.begin(), v.end());
    };
    EXPECT_LT(relative_error(as_float(got_y), want.y), 1e-5) << "documents " << documents;
    expect_lse(as_float(got_lse), want.lse, 1e-5);
    EXPECT_LT(relative_error(as_float(got_d), want.dqkv), 1e-5) << "documents " << documents;
  }
}

// Rows that see no key at all (their document starts after every key a block holds) keep out 0
// and lse −∞ through a merge, and get no gradient.
TEST_P(Attention, RowsThatSeeNothing) {
  const int B = 1, T = 20, NH = 2, KVH = 1, hs = 8, W = (NH + 2 * KVH) * hs;
  const Slab qkv = random_slab("qkv", T * W), dy = random_slab("dy", T * NH * hs);
  // Queries at positions 40..59 against keys at 0..19, every query's document starting at 30.
  AttentionInputs x = packed_attention(view(qkv), B, NH, KVH, hs, PositionRuns::contiguous(T, 40));
  x.keys = PositionRuns::contiguous(T, 0);
  const auto doc = ints_from_host(std::vector<int32_t>(T, 30));
  x.doc_start = doc.data();
  Slab out = random_slab("out", T * NH * hs), lse("lse", NH * T), delta("delta", NH * T),
       dq = random_slab("dq", T * W), dkv = random_slab("dkv", T * W);
  attention_forward(view(out), view(lse), x);
  for (float v : to_host(out)) ASSERT_EQ(v, 0.0f);
  for (float v : to_host(lse)) ASSERT_EQ(v, -INFINITY);
  attention_forward(view(out), view(lse), x, /*merge=*/true);
  for (float v : to_host(out)) ASSERT_EQ(v, 0.0f);
  attention_backward_delta(view(delta), view(out), view(dy), B, T, NH, hs);
  attention_backward(dq.data(), W, false, dkv.data() + NH * hs, dkv.data() + (NH + KVH) * hs, W,
                     false, view(dy), view(lse), view(delta), x);
  const std::vector<float> g = to_host(dq), k = to_host(dkv);
  for (int t = 0; t < T; ++t) {
    for (int c = 0; c < NH * hs; ++c) ASSERT_EQ(g[size_t(t) * W + c], 0.0f);
    for (int c = 0; c < 2 * KVH * hs; ++c) ASSERT_EQ(k[size_t(t) * W + NH * hs + c], 0.0f);
  }
}

// Units are taken by whichever thread is free, but each is computed alone: 1 and 2 threads give
// the same bits (invariant 6).
TEST_P(Attention, SameBitsAtAnyThreadCount) {
#ifdef _OPENMP
  const int B = 2, T = 150, NH = 4, KVH = 2, hs = 16, W = (NH + 2 * KVH) * hs;
  const Slab qkv = random_slab("qkv", B * T * W), dy = random_slab("dy", B * T * NH * hs);
  const PositionRuns runs = PositionRuns::contiguous(T);
  const int before = omp_get_max_threads();
  omp_set_num_threads(1);
  const Result one = fused(qkv, dy, B, NH, KVH, hs, runs, {});
  omp_set_num_threads(std::max(2, before));
  const Result more = fused(qkv, dy, B, NH, KVH, hs, runs, {});
  omp_set_num_threads(before);
  EXPECT_EQ(bits_of(one.out), bits_of(more.out));
  EXPECT_EQ(bits_of(one.lse), bits_of(more.lse));
  EXPECT_EQ(bits_of(one.dqkv), bits_of(more.dqkv));
#else
  GTEST_SKIP() << "a build without OpenMP has one thread";
#endif
}

// The backward against central differences of L = Σ out ⊙ dy (computed in double from the
// forward's fp32 output).
TEST_P(Attention, FiniteDifferences) {
  const int B = 1, T = 70, NH = 2, KVH = 1, hs = 8, W = (NH + 2 * KVH) * hs, Cq = NH * hs;
  Slab qkv = random_slab("qkv", T * W, 0.5f);
  const Slab dy = random_slab("dy", T * Cq);
  const std::vector<int32_t> doc = random_documents(B, T, 3);
  const PositionRuns runs = PositionRuns::contiguous(T);
  const Result analytic = fused(qkv, dy, B, NH, KVH, hs, runs, doc);
  const std::vector<float> w = to_host(dy);
  const auto starts = ints_from_host(doc);
  Slab out("out", T * Cq), lse("lse", NH * T);
  auto loss = [&] {
    attention_forward(view(out), view(lse),
                      packed_attention(view(qkv), B, NH, KVH, hs, runs, starts.data()));
    const std::vector<float> y = to_host(out);
    double l = 0;
    for (size_t i = 0; i < y.size(); ++i) l += double(y[i]) * w[i];
    return l;
  };
  std::vector<int64_t> indices;
  for (int t : {0, 1, 33, 64, 69}) {
    for (int c : {0, 5, Cq + 3, Cq + hs + 7}) indices.push_back(int64_t(t) * W + c);
  }
  test::expect_gradient_matches(qkv, analytic.dqkv, loss, indices, "dqkv", 1e-2f, 2e-2, 2e-3);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Attention,
                         ::testing::Values(KernelShape::kHost, KernelShape::kDevice),
                         [](const ::testing::TestParamInfo<KernelShape>& info) {
                           return info.param == KernelShape::kHost ? "host" : "device";
                         });

}  // namespace mpf
