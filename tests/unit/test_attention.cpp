// The fused attention (model/layers/attention.hpp) in both launch shapes: its output, logsumexps
// and input gradients against plain float64 loops and against the unfused path it replaced; the
// grouped-query ratios 1, 2, 4 and 8; sequences shorter than a tile and not a multiple of one; a
// head size the micro-kernel pads; document masks; ring attention's pieces (keys visited a block
// at a time, merged by their logsumexps, context parallelism's two-chunk rows); bf16; the same
// bits at any thread count; and finite differences. Then the chunked path through the GEMM seam
// (model/layers/chunked_attention.hpp) against the fused kernel, call for call.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/gemm.hpp"
#include "core/bf16.hpp"
#include "core/parallel.hpp"
#include "core/transfer.hpp"
#include "model/layers/attention.hpp"
#include "model/layers/chunked_attention.hpp"
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
  std::vector<double> row_max;  // (B, NH, T) the largest scaled logit a row sees, −∞ for none
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
              std::vector<double>(size_t(B) * T * W, 0.0),
              std::vector<double>(size_t(B) * NH * T, -INFINITY)};
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
        r.row_max[(size_t(b) * NH + h) * T + t] = mx;
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
    std::vector<double> got_y(want.y.size()), got_lse(want.lse.size()), got_d(want.dqkv.size()),
        got_max(want.row_max.size());
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
          delta("delta", int64_t(B) * NH * rows), dq("dq", int64_t(B) * rows * Cq),
          row_max("row_max", int64_t(B) * NH * rows);
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
        attention_forward(view(out), view(lse), inputs((r - step + N) % N), step > 0,
                          view(row_max));
      }
      attention_backward_delta(view(delta), view(out), view(local_dy[size_t(r)]), B, rows, NH, hs);
      for (int step = 0; step < N; ++step) {
        const int owner = (r - step + N) % N;
        float* d = dkv[size_t(owner)].data();
        attention_backward(dq.data(), Cq, step > 0, d, d + Ck, 2 * Ck, true,
                           view(local_dy[size_t(r)]), view(lse), view(delta), inputs(owner));
      }
      const PositionRuns p = rows_of(r);
      const std::vector<float> y = to_host(out), l = to_host(lse), g = to_host(dq),
                               m = to_host(row_max);
      for (int b = 0; b < B; ++b) {
        for (int t = 0; t < p.rows; ++t) {
          const size_t whole_row = size_t(b) * T + p.position(t), local = size_t(b) * rows + t;
          for (int c = 0; c < Cq; ++c) {
            got_y[whole_row * Cq + c] = y[local * Cq + c];
            got_d[whole_row * W + c] = g[local * Cq + c];
          }
          for (int h = 0; h < NH; ++h) {
            got_lse[(size_t(b) * NH + h) * T + p.position(t)] = l[(size_t(b) * NH + h) * rows + t];
            got_max[(size_t(b) * NH + h) * T + p.position(t)] = m[(size_t(b) * NH + h) * rows + t];
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
    // Each row's largest logit, merged over the blocks by max (QK-clip's measure).
    expect_lse(as_float(got_max), want.row_max, 1e-5);
    EXPECT_LT(relative_error(as_float(got_d), want.dqkv), 1e-5) << "documents " << documents;
  }
}

// QK-clip's measure: each row's largest scaled logit q·k/√hs over the keys it sees (documents, a
// window), −∞ for none; and fold_head_max keeps each head's largest over the rows and calls.
TEST_P(Attention, RowMaxIsTheLargestScaledLogit) {
  const int B = 2, T = 90, NH = 4, KVH = 2, hs = 16, W = (NH + 2 * KVH) * hs;
  const Slab qkv = random_slab("qkv", int64_t(B) * T * W), dy = random_slab("dy", B * T * NH * hs);
  const std::vector<int32_t> doc = random_documents(B, T, 7);
  const PositionRuns runs = PositionRuns::contiguous(T);
  const Reference want = reference(to_host(qkv), to_host(dy), B, NH, KVH, hs, runs, doc, false, 5);
  const auto starts = ints_from_host(doc);
  const AttentionInputs x = packed_attention(view(qkv), B, NH, KVH, hs, runs, starts.data(), 5);
  Slab out("out", int64_t(B) * T * NH * hs), lse("lse", int64_t(B) * NH * T),
      row_max("row_max", int64_t(B) * NH * T);
  attention_forward(view(out), view(lse), x, false, view(row_max));
  const std::vector<float> got = to_host(row_max);
  expect_lse(got, want.row_max, 1e-5);
  std::vector<float> start(NH, -INFINITY);
  start[1] = 1e6f;  // a head whose larger value from an earlier call stays
  Slab head_max = from_host("head_max", start);
  fold_head_max(head_max.data(), view(row_max), B, NH, T);
  const std::vector<float> heads = to_host(head_max);
  for (int h = 0; h < NH; ++h) {
    float m = start[size_t(h)];
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t) m = std::max(m, got[(size_t(b) * NH + h) * T + t]);
    EXPECT_EQ(heads[size_t(h)], m) << "head " << h;
  }
  EXPECT_EQ(heads[1], 1e6f);
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

// ---- the chunked path (chunked_attention.hpp) against the fused kernel ------------------------

namespace {

std::vector<double> as_double(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// One call's forward and backward: out, lse, dq (B, queries, NH·hs), dK and dV side by side
// (B, keys, 2·KVH·hs).
struct CallResult {
  std::vector<float> out, lse, dq, dkv;
};
CallResult through(bool chunked_path, int chunk_rows, const AttentionInputs& x, const Slab& dy) {
  const int B = x.B, Tq = x.queries.rows, Tk = x.keys.rows, Cq = x.NH * x.hs, Ck = x.KVH * x.hs;
  Slab out("out", int64_t(B) * Tq * Cq), lse("lse", int64_t(B) * x.NH * Tq),
      delta("delta", int64_t(B) * x.NH * Tq), dq = random_slab("dq", int64_t(B) * Tq * Cq),
                                              dkv = random_slab("dkv", int64_t(B) * Tk * 2 * Ck);
  if (chunked_path) {
    chunked_attention_forward(view(out), view(lse), x, false, chunk_rows);
  } else {
    attention_forward(view(out), view(lse), x);
  }
  attention_backward_delta(view(delta), view(out), view(dy), B, Tq, x.NH, x.hs);
  if (chunked_path) {
    chunked_attention_backward(dq.data(), Cq, false, dkv.data(), dkv.data() + Ck, 2 * Ck, false,
                               view(dy), view(lse), view(delta), x, chunk_rows);
  } else {
    attention_backward(dq.data(), Cq, false, dkv.data(), dkv.data() + Ck, 2 * Ck, false, view(dy),
                       view(lse), view(delta), x);
  }
  return {to_host(out), to_host(lse), to_host(dq), to_host(dkv)};
}

void expect_same_call(const CallResult& got, const CallResult& want, double tol) {
  EXPECT_LT(relative_error(got.out, as_double(want.out)), tol) << "out";
  expect_lse(got.lse, as_double(want.lse), tol);
  EXPECT_LT(relative_error(got.dq, as_double(want.dq)), tol) << "dq";
  EXPECT_LT(relative_error(got.dkv, as_double(want.dkv)), tol) << "dk, dv";
}

// Whether this backend runs bf16 products; says once when it does not.
bool bf16_runs() {
  if (backend::kernels().bf16_missing.empty()) return true;
  static bool said = false;
  if (!said) {
    std::printf("note: the chunked path's bf16 comparisons are skipped: %s\n",
                backend::kernels().bf16_missing.c_str());
    said = true;
  }
  return false;
}

}  // namespace

// The host shape's backward keeps dS between its two passes where it fits, in slices of
// (sequence, kv head) groups or of a group's query tiles, else computes it again: every way gives
// the same bits, in fp32 and bf16, with document masks and a window (the tile pairs seen differ
// by sequence).
TEST_P(Attention, StoredScoresGiveTheSameBits) {
  const int B = 3, T = 150, NH = 4, KVH = 2, hs = 16, W = (NH + 2 * KVH) * hs;
  const Slab qkv = random_slab("qkv", B * T * W), dy = random_slab("dy", B * T * NH * hs);
  const PositionRuns runs = PositionRuns::contiguous(T);
  std::vector<int32_t> doc(size_t(B) * T, 0);
  for (int t = 0; t < T; ++t) doc[size_t(T) + t] = t < 70 ? 0 : 70;  // sequence 1: two documents
  for (const bool bf16 : {false, true}) {
    if (bf16 && !bf16_runs()) continue;
    SCOPED_TRACE(bf16 ? "bf16" : "fp32");
    std::unique_ptr<Bf16Products> scope;
    if (bf16) scope = std::make_unique<Bf16Products>(nullptr, nullptr, 0, 1);
    const int64_t before = set_attention_stored_scores(int64_t(64) << 20);
    const Result all = fused(qkv, dy, B, NH, KVH, hs, runs, doc, 100);
    // At most one group's tiles (two heads of 6 pairs of 64 x 64 scores, 4 bytes a float or a
    // pair of bf16s): a slice a group.
    const int64_t tile = 64 * 64 * 4 / (bf16 ? 2 : 1);
    set_attention_stored_scores(2 * 6 * tile);
    const Result slices = fused(qkv, dy, B, NH, KVH, hs, runs, doc, 100);
    // Less than a group's: its query tiles in ranges (of 1 and 2 tiles: 3 pairs a head at most).
    set_attention_stored_scores(2 * 3 * tile);
    const Result ranges = fused(qkv, dy, B, NH, KVH, hs, runs, doc, 100);
    set_attention_stored_scores(0);
    const Result again = fused(qkv, dy, B, NH, KVH, hs, runs, doc, 100);
    set_attention_stored_scores(before);
    EXPECT_EQ(bits_of(all.dqkv), bits_of(again.dqkv));
    EXPECT_EQ(bits_of(slices.dqkv), bits_of(again.dqkv));
    EXPECT_EQ(bits_of(ranges.dqkv), bits_of(again.dqkv));
    const Reference want =
        reference(to_host(qkv), to_host(dy), B, NH, KVH, hs, runs, doc, bf16, 100);
    EXPECT_LT(relative_error(again.dqkv, want.dqkv), bf16 ? 2e-2 : 1e-5);
  }
}

// The chunked path equals the fused kernel: causal and not (queries after every key), multi-head
// and grouped-query, document masks, sliding windows (with key spans that skip the first keys),
// T not a multiple of the chunk, a chunk longer than T and of one row; in fp32 closely, in bf16
// within the roundings of P and dS (each path rounds its own P: the fused kernel's before
// normalising, the chunked one's after).
TEST_P(Attention, ChunkedEqualsFused) {
  struct Case {
    int B, T, NH, KVH, hs, chunk, window;
    bool documents, causal;
  };
  for (const Case c :
       {Case{2, 70, 4, 4, 16, 16, 0, false, true}, Case{1, 70, 4, 4, 16, 16, 0, false, false},
        Case{2, 50, 8, 2, 24, 16, 0, false, true}, Case{1, 45, 8, 1, 8, 7, 0, true, true},
        Case{2, 70, 4, 2, 16, 16, 0, true, true}, Case{2, 70, 4, 2, 16, 16, 7, false, true},
        Case{2, 70, 4, 2, 16, 16, 20, true, true}, Case{1, 33, 2, 1, 8, 64, 0, false, true},
        Case{1, 20, 2, 2, 8, 1, 5, true, true},
        // Key spans that start past the first 64 keys (spans are multiples of 64 keys).
        Case{1, 200, 4, 2, 16, 32, 20, false, true}, Case{2, 200, 4, 2, 8, 48, 0, true, true}}) {
    for (const bool bf16 : {false, true}) {
      if (bf16 && !bf16_runs()) continue;
      SCOPED_TRACE("B " + std::to_string(c.B) + " T " + std::to_string(c.T) + " NH " +
                   std::to_string(c.NH) + " KVH " + std::to_string(c.KVH) + " chunk " +
                   std::to_string(c.chunk) + " window " + std::to_string(c.window) +
                   (c.documents ? " documents" : "") + (c.causal ? "" : " not causal") +
                   (bf16 ? " bf16" : ""));
      const int W = (c.NH + 2 * c.KVH) * c.hs;
      const Slab qkv = random_slab("qkv", int64_t(c.B) * c.T * W),
                 dy = random_slab("dy", int64_t(c.B) * c.T * c.NH * c.hs);
      const std::vector<int32_t> doc =
          c.documents ? random_documents(c.B, c.T, 13) : std::vector<int32_t>{};
      const auto starts = ints_from_host(doc.empty() ? std::vector<int32_t>{0} : doc);
      AttentionInputs x =
          packed_attention(view(qkv), c.B, c.NH, c.KVH, c.hs, PositionRuns::contiguous(c.T),
                           c.documents ? starts.data() : nullptr, c.window);
      if (!c.causal) x.queries = PositionRuns::contiguous(c.T, c.T);
      std::unique_ptr<Bf16Products> scope;
      if (bf16) scope = std::make_unique<Bf16Products>(nullptr, nullptr, 0, 1);
      const CallResult want = through(false, 0, x, dy), got = through(true, c.chunk, x, dy);
      expect_same_call(got, want, bf16 ? 1e-2 : 2e-6);
    }
  }
}

// Ring attention's calls through both paths: a rank's two-chunk rows against each rank's keys in
// turn, merged by their logsumexps; the backward adding each block's dQ and writing, then adding
// to, a block's dK and dV. And the chunked path's own blocks merged equal its single call.
TEST_P(Attention, ChunkedRingBlocks) {
  for (const bool documents : {false, true}) {
    SCOPED_TRACE(documents ? "documents" : "no documents");
    const int B = 2, chunk = 23, NH = 4, KVH = 2, hs = 16, Tc = 16;
    const int W = (NH + 2 * KVH) * hs, Cq = NH * hs, Ck = KVH * hs, rows = 2 * chunk;
    const Slab qkv = random_slab("qkv", int64_t(B) * rows * W),
               kv = random_slab("kv", int64_t(B) * rows * W), dy = random_slab("dy", B * rows * Cq);
    const std::vector<int32_t> doc =
        documents ? random_documents(B, rows, 9) : std::vector<int32_t>(size_t(B) * rows, 0);
    const auto starts = ints_from_host(doc);
    // Rank 0's rows (chunks 0 and 3) against its own keys, then rank 1's (chunks 1 and 2).
    auto inputs = [&](int owner) {
      AttentionInputs x =
          packed_attention(view(qkv), B, NH, KVH, hs, PositionRuns::two(chunk, 0, 3 * chunk),
                           documents ? starts.data() : nullptr);
      if (owner == 1) {
        x.k = kv.data() + Cq;
        x.v = kv.data() + Cq + Ck;
        x.keys = PositionRuns::two(chunk, chunk, 2 * chunk);
      }
      return x;
    };
    for (const bool bf16 : {false, true}) {
      if (bf16 && !bf16_runs()) continue;
      std::unique_ptr<Bf16Products> scope;
      if (bf16) scope = std::make_unique<Bf16Products>(nullptr, nullptr, 0, 1);
      CallResult result[2];
      for (const bool chunked_path : {false, true}) {
        Slab out("out", int64_t(B) * rows * Cq), lse("lse", int64_t(B) * NH * rows),
            delta("delta", int64_t(B) * NH * rows), dq("dq", int64_t(B) * rows * Cq),
            dkv = random_slab("dkv", int64_t(B) * rows * 2 * Ck);
        for (int step = 0; step < 2; ++step) {
          if (chunked_path) {
            chunked_attention_forward(view(out), view(lse), inputs(step), step > 0, Tc);
          } else {
            attention_forward(view(out), view(lse), inputs(step), step > 0);
          }
        }
        attention_backward_delta(view(delta), view(out), view(dy), B, rows, NH, hs);
        // Block 1's dK and dV written, then block 0's added to them: a sum over both blocks.
        for (const int owner : {1, 0}) {
          float* d = dkv.data();
          if (chunked_path) {
            chunked_attention_backward(dq.data(), Cq, owner == 0, d, d + Ck, 2 * Ck, owner == 0,
                                       view(dy), view(lse), view(delta), inputs(owner), Tc);
          } else {
            attention_backward(dq.data(), Cq, owner == 0, d, d + Ck, 2 * Ck, owner == 0, view(dy),
                               view(lse), view(delta), inputs(owner));
          }
        }
        result[chunked_path] = {to_host(out), to_host(lse), to_host(dq), to_host(dkv)};
      }
      expect_same_call(result[1], result[0], bf16 ? 1e-2 : 2e-6);
    }
  }
  // One sequence's keys in two blocks, merged, against the chunked path's single call.
  const int B = 1, T = 60, NH = 4, KVH = 2, hs = 8, W = (NH + 2 * KVH) * hs, Cq = NH * hs;
  const Slab qkv = random_slab("qkv", int64_t(B) * T * W);
  const AttentionInputs whole =
      packed_attention(view(qkv), B, NH, KVH, hs, PositionRuns::contiguous(T));
  Slab out("out", B * T * Cq), lse("lse", B * NH * T), merged("merged", B * T * Cq),
      merged_lse("merged_lse", B * NH * T);
  chunked_attention_forward(view(out), view(lse), whole, false, 16);
  for (const int block : {0, 1}) {
    AttentionInputs x = whole;
    x.keys = PositionRuns::contiguous(T / 2, block * T / 2);
    x.k += int64_t(block) * (T / 2) * W;
    x.v += int64_t(block) * (T / 2) * W;
    chunked_attention_forward(view(merged), view(merged_lse), x, block > 0, 16);
  }
  EXPECT_LT(relative_error(to_host(merged), as_double(to_host(out))), 1e-5);
  expect_lse(to_host(merged_lse), as_double(to_host(lse)), 1e-5);
}

// Run again, and on 1 and 2 threads, the chunked path gives the same bits: its sums have a fixed
// order (the row kernels' lanes, the products' own), whatever the thread count.
TEST_P(Attention, ChunkedSameBitsAtAnyThreadCount) {
#ifdef _OPENMP
  const int B = 2, T = 150, NH = 4, KVH = 2, hs = 16, W = (NH + 2 * KVH) * hs;
  const Slab qkv = random_slab("qkv", B * T * W), dy = random_slab("dy", B * T * NH * hs);
  const std::vector<int32_t> doc = random_documents(B, T, 17);
  const auto starts = ints_from_host(doc);
  const AttentionInputs x =
      packed_attention(view(qkv), B, NH, KVH, hs, PositionRuns::contiguous(T), starts.data(), 40);
  const int before = omp_get_max_threads();
  omp_set_num_threads(1);
  const CallResult one = through(true, 32, x, dy);
  omp_set_num_threads(std::max(2, before));
  const CallResult more = through(true, 32, x, dy), again = through(true, 32, x, dy);
  omp_set_num_threads(before);
  for (const CallResult* r : {&more, &again}) {
    EXPECT_EQ(bits_of(one.out), bits_of(r->out));
    EXPECT_EQ(bits_of(one.lse), bits_of(r->lse));
    EXPECT_EQ(bits_of(one.dq), bits_of(r->dq));
    EXPECT_EQ(bits_of(one.dkv), bits_of(r->dkv));
  }
#else
  GTEST_SKIP() << "a build without OpenMP has one thread";
#endif
}

// Rows that see no key: a chunk of them all (out 0, lse −∞, kept through a merge, no gradient)
// and a chunk where only some rows see keys, against the fused kernel.
TEST_P(Attention, ChunkedRowsThatSeeNothing) {
  const int B = 1, T = 20, NH = 2, KVH = 1, hs = 8, W = (NH + 2 * KVH) * hs, Cq = NH * hs;
  const Slab qkv = random_slab("qkv", T * W), dy = random_slab("dy", T * Cq);
  // Queries at positions 40..59 against keys at 0..19; the first 8 queries' document starts at
  // 10, the rest's at 30 (after every key).
  AttentionInputs x = packed_attention(view(qkv), B, NH, KVH, hs, PositionRuns::contiguous(T, 40));
  x.keys = PositionRuns::contiguous(T, 0);
  std::vector<int32_t> doc(T, 30);
  std::fill_n(doc.begin(), 8, 10);
  const auto starts = ints_from_host(doc);
  x.doc_start = starts.data();
  for (const int chunk : {8, 6}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    const CallResult got = through(true, chunk, x, dy), want = through(false, 0, x, dy);
    expect_same_call(got, want, 2e-6);
    for (int t = 8; t < T; ++t) {
      for (int h = 0; h < NH; ++h) ASSERT_EQ(got.lse[size_t(h) * T + t], -INFINITY);
      for (int c = 0; c < Cq; ++c) {
        ASSERT_EQ(got.out[size_t(t) * Cq + c], 0.0f);
        ASSERT_EQ(got.dq[size_t(t) * Cq + c], 0.0f);
      }
    }
  }
  // Every row blind: out 0 and lse −∞, through a merge too.
  const auto late = ints_from_host(std::vector<int32_t>(T, 30));
  x.doc_start = late.data();
  Slab out = random_slab("out", T * Cq), lse("lse", NH * T);
  chunked_attention_forward(view(out), view(lse), x, false, 8);
  chunked_attention_forward(view(out), view(lse), x, true, 8);
  for (float v : to_host(out)) ASSERT_EQ(v, 0.0f);
  for (float v : to_host(lse)) ASSERT_EQ(v, -INFINITY);
  const CallResult blind = through(true, 8, x, dy);
  for (float v : blind.dq) ASSERT_EQ(v, 0.0f);
  for (float v : blind.dkv) ASSERT_EQ(v, 0.0f);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Attention,
                         ::testing::Values(KernelShape::kHost, KernelShape::kDevice),
                         [](const ::testing::TestParamInfo<KernelShape>& info) {
                           return info.param == KernelShape::kHost ? "host" : "device";
                         });

}  // namespace mpf
