// Every kernel against a plain loop on the host in double precision, in both kernel shapes
// (core/parallel.hpp): the host shape (one thread per row, lanes) and the device shape (a team per
// row, a thread per element, column sums in two passes, sorted token runs). In a CPU build both
// run on the CPU; in a GPU build both run on the GPU and the loops here are the CPU's results.
// Sizes are chosen to leave remainders: rows not a multiple of a block, widths not of 16 lanes or
// of a warp, a vocabulary shard with padding, tokens repeated.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/parallel.hpp"
#include "core/transfer.hpp"
#include "core/vector_math.hpp"
#include "model/layers/cross_entropy.hpp"
#include "model/layers/encoder.hpp"
#include "model/layers/layernorm.hpp"
#include "model/layers/linear.hpp"
#include "model/layers/moe.hpp"
#include "model/layers/rmsnorm.hpp"
#include "model/layers/rope.hpp"
#include "model/layers/swiglu.hpp"
#include "optim/adamw.hpp"
#include "optim/grad_norm.hpp"
#include "test_helpers.hpp"

namespace mpf {

using test::random_slab;
using test::to_host;
using test::view;

namespace {

double gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

Slab from_host(const char* name, const std::vector<float>& v) {
  Slab s(std::string(name), v.size());
  copy_from_host(s.data(), v.data(), v.size() * sizeof(float), "test");
  return s;
}

Tokens tokens_from_host(const std::vector<int32_t>& v) {
  Tokens t("tokens", v.size());
  copy_from_host(t.data(), v.data(), v.size() * sizeof(int32_t), "test");
  return t;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double rtol,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0.0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], rtol * (scale + std::fabs(want[i])) + 1e-30)
        << what << " element " << i;
  }
}

// Kernels run from free functions: nvcc rejects a KOKKOS_LAMBDA inside a TEST body.
double device_sum_of_squares(const Slab& x) {
  const float* p = x.data();
  return sum(
      "test::sum", int64_t(x.extent(0)), KOKKOS_LAMBDA(int64_t i) { return double(p[i]) * p[i]; });
}

// Sums of squares of pieces of x, as the gradient norm added them before its pieces shared two
// launches: sum_into a piece at a time, in order, into its total.
struct SquaresPiece {
  int64_t first, n;
  int sum;
};
std::vector<double> squares_piece_by_piece(const Slab& x, const std::vector<SquaresPiece>& pieces,
                                           int sums) {
  Kokkos::View<double*, MemSpace> totals("totals", sums);
  for (const SquaresPiece& piece : pieces) {
    const float* g = x.data() + piece.first;
    sum_into(
        "test::sum_into", piece.n, KOKKOS_LAMBDA(int64_t i) { return double(g[i]) * g[i]; },
        totals.data() + piece.sum);
  }
  std::vector<double> out(size_t(sums), 0.0);
  copy_to_host(out.data(), totals.data(), out.size() * sizeof(double), "test");
  return out;
}

std::vector<int32_t> ints_to_host(const Tokens& t) {
  std::vector<int32_t> v(t.extent(0));
  copy_to_host(v.data(), t.data(), v.size() * sizeof(int32_t), "test");
  return v;
}

std::vector<uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

}  // namespace

class Kernels : public ::testing::TestWithParam<KernelShape> {
 protected:
  void SetUp() override {
    before_ = kernel_shape();
    set_kernel_shape(GetParam());
  }
  void TearDown() override { set_kernel_shape(before_); }

 private:
  KernelShape before_ = KernelShape::kHost;
};

TEST_P(Kernels, LayerNorm) {
  const int N = 37, C = 200;
  Slab inp = random_slab("inp", N * C, 2.0f), w = random_slab("w", C), b = random_slab("b", C),
       dout = random_slab("dout", N * C), dres = random_slab("dres", N * C);
  Slab out("out", N * C), mean("mean", N), rstd("rstd", N), dinp("dinp", N * C);
  std::vector<float> dw0 = to_host(random_slab("dw0", C)), db0 = to_host(random_slab("db0", C));
  Slab dw = from_host("dw", dw0), db = from_host("db", db0);
  layernorm_forward(view(out), view(mean), view(rstd), view(inp), view(w), view(b), N, C);
  layernorm_backward_input(view(dinp), view(dres), view(dout), view(inp), view(mean), view(rstd),
                           view(w), N, C);
  layernorm_backward_weight(view(dw), view(db), view(dout), view(inp), view(mean), view(rstd), N,
                            C);

  const std::vector<float> x = to_host(inp), hw = to_host(w), hb = to_host(b), dy = to_host(dout),
                           dr = to_host(dres);
  std::vector<double> y(N * C), m(N), s(N), dx(N * C), gw(dw0.begin(), dw0.end()),
      gb(db0.begin(), db0.end());
  for (int n = 0; n < N; ++n) {
    double mu = 0, var = 0;
    for (int c = 0; c < C; ++c) mu += x[n * C + c];
    mu /= C;
    for (int c = 0; c < C; ++c) var += (x[n * C + c] - mu) * (x[n * C + c] - mu);
    const double r = 1.0 / std::sqrt(var / C + 1e-5);
    m[n] = mu;
    s[n] = r;
    double a = 0, bsum = 0;  // means of w·dy and of w·dy·xhat
    for (int c = 0; c < C; ++c) {
      const double xhat = (x[n * C + c] - mu) * r;
      y[n * C + c] = xhat * hw[c] + hb[c];
      a += hw[c] * dy[n * C + c];
      bsum += hw[c] * dy[n * C + c] * xhat;
      gw[c] += dy[n * C + c] * xhat;
      gb[c] += dy[n * C + c];
    }
    a /= C;
    bsum /= C;
    for (int c = 0; c < C; ++c) {
      const double xhat = (x[n * C + c] - mu) * r;
      dx[n * C + c] = dr[n * C + c] + r * (hw[c] * dy[n * C + c] - a - xhat * bsum);
    }
  }
  expect_close(to_host(out), y, 1e-5, "out");
  expect_close(to_host(mean), m, 1e-5, "mean");
  expect_close(to_host(rstd), s, 1e-5, "rstd");
  expect_close(to_host(dinp), dx, 1e-5, "dinp");
  expect_close(to_host(dw), gw, 1e-5, "dweight");
  expect_close(to_host(db), gb, 1e-5, "dbias");
}

TEST_P(Kernels, LinearWithBiasResidualAndGelu) {
  const int N = 300, IC = 24, OC = 70;
  Slab inp = random_slab("inp", N * IC), w = random_slab("w", OC * IC, 0.3f),
       b = random_slab("b", OC), res = random_slab("res", N * OC),
       dout = random_slab("dout", N * OC);
  Slab out("out", N * OC), pre("pre", N * OC), act("act", N * OC), dw("dw", OC * IC);
  std::vector<float> db0 = to_host(random_slab("db0", OC));
  Slab db = from_host("db", db0);
  linear_forward(view(out), view(res), view(inp), view(w), view(b), N, IC, OC);
  linear_gelu_forward(view(pre), view(act), view(inp), view(w), view(b), N, IC, OC);
  linear_backward_weight(view(dw), view(db), view(dout), view(inp), N, IC, OC);

  const std::vector<float> x = to_host(inp), hw = to_host(w), hb = to_host(b), r = to_host(res),
                           dy = to_host(dout);
  std::vector<double> y(N * OC), p(N * OC), g(N * OC), gb(db0.begin(), db0.end());
  for (int n = 0; n < N; ++n) {
    for (int o = 0; o < OC; ++o) {
      double acc = hb[o];
      for (int i = 0; i < IC; ++i) acc += double(x[n * IC + i]) * hw[o * IC + i];
      p[n * OC + o] = acc;
      g[n * OC + o] = gelu(acc);
      y[n * OC + o] = acc + r[n * OC + o];
      gb[o] += dy[n * OC + o];
    }
  }
  expect_close(to_host(out), y, 1e-5, "residual + inp·Wᵀ + b");
  expect_close(to_host(pre), p, 1e-5, "inp·Wᵀ + b before GELU");
  expect_close(to_host(act), g, 1e-5, "GELU(inp·Wᵀ + b)");
  expect_close(to_host(db), gb, 1e-5, "dbias");
}

TEST_P(Kernels, RMSNorm) {
  const int N = 37, C = 200;
  const float eps = 1e-6f;
  Slab inp = random_slab("inp", N * C, 2.0f), w = random_slab("w", C),
       dout = random_slab("dout", N * C), dres = random_slab("dres", N * C);
  Slab out("out", N * C), rstd("rstd", N), dinp("dinp", N * C);
  std::vector<float> dw0 = to_host(random_slab("dw0", C));
  Slab dw = from_host("dw", dw0);
  rmsnorm_forward(view(out), view(rstd), view(inp), view(w), N, C, eps);
  rmsnorm_backward_input(view(dinp), view(dres), view(dout), view(inp), view(rstd), view(w), N, C);
  rmsnorm_backward_weight(view(dw), view(dout), view(inp), view(rstd), N, C);

  const std::vector<float> x = to_host(inp), hw = to_host(w), dy = to_host(dout),
                           dr = to_host(dres);
  std::vector<double> y(N * C), s(N), dx(N * C), gw(dw0.begin(), dw0.end());
  for (int n = 0; n < N; ++n) {
    double ms = 0;
    for (int c = 0; c < C; ++c) ms += double(x[n * C + c]) * x[n * C + c];
    const double r = 1.0 / std::sqrt(ms / C + eps);
    s[n] = r;
    double a = 0;  // mean of w·dy·xhat
    for (int c = 0; c < C; ++c) {
      const double xhat = x[n * C + c] * r;
      y[n * C + c] = xhat * hw[c];
      a += hw[c] * dy[n * C + c] * xhat;
      gw[c] += dy[n * C + c] * xhat;
    }
    a /= C;
    for (int c = 0; c < C; ++c) {
      dx[n * C + c] = dr[n * C + c] + r * (hw[c] * dy[n * C + c] - x[n * C + c] * r * a);
    }
  }
  expect_close(to_host(out), y, 1e-5, "out");
  expect_close(to_host(rstd), s, 1e-5, "rstd");
  expect_close(to_host(dinp), dx, 1e-5, "dinp");
  expect_close(to_host(dw), gw, 1e-5, "dweight");
}

TEST_P(Kernels, SwiGLU) {
  const int N = 37, F = 70;
  Slab inp = random_slab("inp", N * 2 * F, 3.0f), dout = random_slab("dout", N * F);
  Slab out("out", N * F), dinp("dinp", N * 2 * F);
  swiglu_forward(view(out), view(inp), N, F);
  swiglu_backward_input(view(dinp), view(dout), view(inp), N, F);
  const std::vector<float> x = to_host(inp), dy = to_host(dout);
  std::vector<double> y(N * F), dx(N * 2 * F);
  for (int n = 0; n < N; ++n) {
    for (int f = 0; f < F; ++f) {
      const double g = x[n * 2 * F + f], u = x[n * 2 * F + F + f], sg = 1.0 / (1.0 + std::exp(-g));
      y[n * F + f] = g * sg * u;
      dx[n * 2 * F + f] = dy[n * F + f] * u * sg * (1.0 + g * (1.0 - sg));
      dx[n * 2 * F + F + f] = dy[n * F + f] * g * sg;
    }
  }
  expect_close(to_host(out), y, 1e-5, "silu(gate)·up");
  expect_close(to_host(dinp), dx, 1e-5, "dgate | dup");
  // In place over its input, the same bits.
  swiglu_backward_input(view(inp), view(dout), view(inp), N, F);
  EXPECT_EQ(bits_of(to_host(inp)), bits_of(to_host(dinp)));
}

TEST_P(Kernels, RotaryEmbedding) {
  // 2 sequences of 19 rows from position 4; hs = 10 leaves a remainder in every vector loop.
  const int B = 2, T = 19, pos0 = 4, NH = 3, KVH = 1, hs = 10, half = hs / 2;
  const int W = (NH + 2 * KVH) * hs, rows = B * T, max_pos = pos0 + T;
  const std::vector<float> inv = rope_inverse_frequencies(hs, 10000.0, RopeScaling{});
  Slab cos_t("cos", max_pos * half), sin_t("sin", max_pos * half);
  rope_tables(view(cos_t), view(sin_t), inv, max_pos);
  Slab qkv = random_slab("qkv", rows * W), dqkv = random_slab("dqkv", rows * W);
  const std::vector<float> x = to_host(qkv), dx = to_host(dqkv), c = to_host(cos_t),
                           sn = to_host(sin_t);
  rope_forward(view(qkv), view(cos_t), view(sin_t), rows, T, pos0, NH, KVH, hs);
  rope_backward(view(dqkv), view(cos_t), view(sin_t), rows, T, pos0, NH, KVH, hs);
  std::vector<double> y(x.begin(), x.end()), dy(dx.begin(), dx.end());
  for (int n = 0; n < rows; ++n) {
    const int p = pos0 + n % T;
    for (int h = 0; h < NH + KVH; ++h) {
      for (int i = 0; i < half; ++i) {
        const size_t a = size_t(n) * W + h * hs + i, b = a + half;
        const double co = c[p * half + i], si = sn[p * half + i];
        y[a] = x[a] * co - x[b] * si;
        y[b] = x[b] * co + x[a] * si;
        dy[a] = dx[a] * co + dx[b] * si;
        dy[b] = dx[b] * co - dx[a] * si;
      }
    }
  }
  expect_close(to_host(qkv), y, 1e-6, "rotated Q and K, V as it was");
  expect_close(to_host(dqkv), dy, 1e-6, "dqkv rotated back");
}

// The classifier as it was before its gradient joined the loss's pass (one rank): a kernel turning
// the logits into probabilities (the max, exp(z − max) in place and their sum, z / sum), then one
// writing probs · dloss − onehot · dloss over them.
void previous_classifier(Tensor losses, Tensor z, const Tokens& targets, float dloss, int64_t N,
                         int V, int Vl) {
  for_rows(
      "previous_forward", N, Vl, KOKKOS_LAMBDA(const Row& r, int64_t n) {
        float* x = z.data() + n * Vl;
        const float m = r.max(V, [x](int j) { return x[j]; });
        const float target = x[targets(n)];
        r.for_each(V, [=](int j) { x[j] = vmath::exp(x[j] - m); });
        const float s = r.sum(V, [x](int j) { return x[j]; });
        r.once([=] { losses(n) = m + logf(s) - target; });
        const float inv = 1.0f / s;
        r.for_each(V, [=](int j) { x[j] *= inv; });
        r.for_each(Vl - V, [=](int j) { x[V + j] = 0.0f; });
      });
  for_each_2d(
      "previous_backward", N, Vl, KOKKOS_LAMBDA(int64_t n, int j) {
        z(n * Vl + j) = z(n * Vl + j) * dloss - (j == targets(n) ? dloss : 0.0f);
      });
}

TEST_P(Kernels, CrossEntropyWithPaddedVocabulary) {
  const int N = 23, V = 1000, Vl = 1024;
  Slab logits = random_slab("logits", N * Vl, 3.0f), losses("losses", N), stats("stats", 3 * N);
  std::vector<int32_t> t(N);
  for (int n = 0; n < N; ++n) t[n] = (n * 397) % V;
  const Tokens targets = tokens_from_host(t);
  const std::vector<float> z = to_host(logits);
  const float dloss = 0.25f;
  // The losses only: the logits stay as they were.
  cross_entropy_forward(view(losses), view(logits), view(stats), targets, N, V, 0, Vl,
                        MPI_COMM_SELF);
  const std::vector<float> losses_only = to_host(losses);
  EXPECT_EQ(to_host(logits), z);
  // Then the gradient from the forward's row statistics, in a pass of its own.
  cross_entropy_gradient(view(logits), view(stats), targets, dloss, N, V, 0, Vl);
  const std::vector<float> two_passes = to_host(logits);
  // One pass: the losses and the gradient together, with the same bits.
  Slab one = from_host("one", z);
  cross_entropy_forward(view(losses), view(one), view(stats), targets, N, V, 0, Vl, MPI_COMM_SELF,
                        dloss);
  EXPECT_EQ(to_host(losses), losses_only);
  EXPECT_EQ(to_host(one), two_passes);
  // The same bits as before, when the probabilities were kept between the passes.
  Slab before = from_host("before", z), losses_before("losses_before", N);
  previous_classifier(view(losses_before), view(before), targets, dloss, N, V, Vl);
  EXPECT_EQ(to_host(losses_before), losses_only);
  EXPECT_EQ(to_host(before), two_passes);

  std::vector<double> want_loss(N), want_d(N * Vl, 0.0);
  for (int n = 0; n < N; ++n) {
    double mx = -1e30, total = 0;
    for (int j = 0; j < V; ++j) mx = std::max(mx, double(z[n * Vl + j]));
    for (int j = 0; j < V; ++j) total += std::exp(z[n * Vl + j] - mx);
    want_loss[n] = mx + std::log(total) - z[n * Vl + t[n]];
    for (int j = 0; j < V; ++j) {
      want_d[n * Vl + j] = (std::exp(z[n * Vl + j] - mx) / total - (j == t[n])) * dloss;
    }
  }
  expect_close(losses_only, want_loss, 1e-5, "losses");
  expect_close(two_passes, want_d, 1e-5, "dlogits (0 in the padding)");
}

// bf16 logits (the LM head's under --precision bf16): read as fp32, so the losses are those of
// the fp32 classifier on the same values, and the gradient is its gradient rounded once to bf16,
// in one pass or in two.
TEST_P(Kernels, CrossEntropyOfBf16Logits) {
  const int N = 19, V = 1000, Vl = 1024;
  std::vector<int32_t> t(N);
  for (int n = 0; n < N; ++n) t[n] = (n * 211 + 5) % V;
  const Tokens targets = tokens_from_host(t);
  std::vector<float> z = to_host(random_slab("logits", N * Vl, 3.0f));
  std::vector<bf16> z16(z.size());
  for (size_t i = 0; i < z.size(); ++i) {
    z16[i] = to_bf16(z[i]);
    z[i] = from_bf16(z16[i]);
  }
  const float dloss = 0.125f;
  Slab f32 = from_host("f32", z), losses32("losses32", N), stats("stats", 3 * N);
  cross_entropy_forward(view(losses32), view(f32), view(stats), targets, N, V, 0, Vl, MPI_COMM_SELF,
                        dloss);
  std::vector<bf16> want16(z.size());
  const std::vector<float> d32 = to_host(f32);
  for (size_t i = 0; i < z.size(); ++i) want16[i] = to_bf16(d32[i]);
  auto to_device16 = [&](const std::vector<bf16>& h) {
    Bf16Slab d("z16", h.size());
    Kokkos::deep_copy(
        d, Kokkos::View<const bf16*, HostSpace, Kokkos::MemoryUnmanaged>(h.data(), h.size()));
    return d;
  };
  auto to_host16 = [](const Bf16Slab& d) {
    std::vector<bf16> h(d.extent(0));
    Kokkos::deep_copy(Kokkos::View<bf16*, HostSpace, Kokkos::MemoryUnmanaged>(h.data(), h.size()),
                      d);
    return h;
  };
  Bf16Slab one = to_device16(z16);
  Slab losses("losses", N);
  cross_entropy_forward(view(losses), Tensor16(one.data(), one.extent(0)), view(stats), targets, N,
                        V, 0, Vl, MPI_COMM_SELF, dloss);
  EXPECT_EQ(to_host(losses), to_host(losses32));
  EXPECT_EQ(to_host16(one), want16);
  Bf16Slab two = to_device16(z16);
  cross_entropy_forward(view(losses), Tensor16(two.data(), two.extent(0)), view(stats), targets, N,
                        V, 0, Vl, MPI_COMM_SELF);
  EXPECT_EQ(to_host16(two), z16);  // the losses only: the logits as they were
  cross_entropy_gradient(Tensor16(two.data(), two.extent(0)), view(stats), targets, dloss, N, V, 0,
                         Vl);
  EXPECT_EQ(to_host16(two), want16);
}

TEST_P(Kernels, EmbeddingOfAVocabularyShardWithRepeatedTokens) {
  const int B = 3, T = 40, C = 33, V = 50, begin = 20, shard = 17;  // rows 20..36 held here
  std::vector<int32_t> tok(B * T);
  for (int i = 0; i < B * T; ++i) tok[i] = (i * 7 + i / 5) % V;  // every token several times
  const Tokens tokens = tokens_from_host(tok);
  Slab wte = random_slab("wte", shard * C), wpe = random_slab("wpe", T * C),
       dout = random_slab("dout", B * T * C), out("out", B * T * C);
  std::vector<float> dwte0 = to_host(random_slab("dwte0", shard * C)),
                     dwpe0 = to_host(random_slab("dwpe0", T * C));
  Slab dwte = from_host("dwte", dwte0), dwpe = from_host("dwpe", dwpe0);
  encoder_forward(view(out), tokens, view(wte), view(wpe), B, T, C, begin, shard, true);
  encoder_backward_weight(view(dwte), view(dwpe), view(dout), tokens, B, T, C, begin, shard);

  const std::vector<float> e = to_host(wte), p = to_host(wpe), dy = to_host(dout);
  std::vector<double> y(B * T * C), ge(dwte0.begin(), dwte0.end()), gp(dwpe0.begin(), dwpe0.end());
  for (int bt = 0; bt < B * T; ++bt) {
    const int row = tok[bt] - begin, t = bt % T;
    const bool mine = row >= 0 && row < shard;
    for (int c = 0; c < C; ++c) {
      y[bt * C + c] = (mine ? e[row * C + c] : 0.0) + p[t * C + c];
      if (mine) ge[row * C + c] += dy[bt * C + c];
      gp[t * C + c] += dy[bt * C + c];
    }
  }
  expect_close(to_host(out), y, 1e-6, "embedding");
  expect_close(to_host(dwte), ge, 1e-5, "dwte (this shard's rows)");
  expect_close(to_host(dwpe), gp, 1e-5, "dwpe");
}

TEST_P(Kernels, SumOfAMillionElements) {
  const int64_t n = 1000003;
  Slab x = random_slab("x", n);
  const std::vector<float> h = to_host(x);
  double want = 0;
  for (float v : h) want += double(v) * v;
  EXPECT_NEAR(device_sum_of_squares(x), want, 1e-10 * want);
}

// The gradient norm's pieces in two launches give each sum the bits of summing them one by one:
// pieces of no element, of one, around a block's length, of several blocks and a remainder, in
// two sums; read again (the blocks' table kept) and after other pieces (a new table).
TEST_P(Kernels, SumOfSquaresOfManyPiecesAsPieceByPiece) {
  const int64_t B = kSumBlock;
  Slab x = random_slab("x", 6 * B, 3.0f);
  const std::vector<SquaresPiece> first = {{7, 0, 0},         {5, 1, 1},         {10, B - 1, 0},
                                           {B + 3, B, 1},     {9, 3 * B + 5, 0}, {4 * B, 17, 1},
                                           {2 * B, B + 1, 0}, {11, 2, 1}};
  const std::vector<SquaresPiece> second = {{3, 2 * B, 1}, {0, 5 * B + 9, 0}};
  SumOfSquares squares(2);
  for (const std::vector<SquaresPiece>* pieces : {&first, &first, &second, &first}) {
    squares.reset();
    for (const SquaresPiece& p : *pieces) squares.add(x.data() + p.first, p.n, p.sum);
    const std::vector<double> got = squares.read_all(),
                              want = squares_piece_by_piece(x, *pieces, 2);
    EXPECT_EQ(got, want);
    EXPECT_GT(got[0], 0.0);
    EXPECT_GT(got[1], 0.0);
  }
}

namespace {
// The model an AdamW test's segments belong to (their decay comes from the tensors' table).
GPTConfig adamw_test_model() {
  GPTConfig model;
  model.layers = 1;
  model.heads = 1;
  model.channels = 8;
  model.vocab = 16;
  model.padded_vocab = 16;
  model.max_seq_len = 8;
  return model;
}
}  // namespace

TEST_P(Kernels, AdamWOverSegmentsOfEveryLength) {
  // Two tensors: a matrix (weight decay) of 5000 elements, more than one 4096-element chunk of
  // the device shape's single kernel, and a 3-element LayerNorm bias (none).
  const GPTConfig model = adamw_test_model();
  const int64_t n = 5003;
  std::vector<OptimizerSegment> segments = {{0, 0, 0, 5000, TensorId::wte},
                                            {5000, 5000, 5000, 3, TensorId::ln1b}};
  AdamWConfig cfg;
  cfg.weight_decay = 0.1f;
  AdamW adam(cfg, model, segments, n);
  Slab p = random_slab("p", n), g = random_slab("g", n);
  std::vector<double> hp(n), m(n, 0.0), v(n, 0.0);
  const std::vector<float> p0 = to_host(p), hg = to_host(g);
  for (int64_t i = 0; i < n; ++i) hp[i] = p0[i];
  const float lr = 1e-2f, scale = 0.5f;
  for (int step = 1; step <= 2; ++step) {
    adam.step(p.data(), g.data(), lr, scale);
    for (int64_t i = 0; i < n; ++i) {
      const double gi = double(hg[i]) * scale, wd = i < 5000 ? 0.1 : 0.0;
      m[i] = 0.9 * m[i] + 0.1 * gi;
      v[i] = 0.999 * v[i] + 0.001 * gi * gi;
      const double mhat = m[i] / (1 - std::pow(0.9, step)),
                   vhat = v[i] / (1 - std::pow(0.999, step));
      hp[i] -= lr * (mhat / (std::sqrt(vhat) + 1e-8) + wd * hp[i]);
    }
  }
  expect_close(to_host(p), hp, 1e-6, "parameters after two AdamW steps");
}

// Under Muon the second moment holds AdamW's segments only, packed in the first moment's order (a
// Muon matrix keeps one moment, optim/adamw.hpp): a Muon segment between two of AdamW's is left
// alone, with no place in v, and AdamW's update as they would alone, on either shape (the device
// shape's chunks read v at their own offsets).
TEST_P(Kernels, AdamWPacksTheSecondMomentAroundMuonSegments) {
  const GPTConfig model = adamw_test_model();
  const int64_t a = 5000, b = 4100, c = 3, n = a + b + c;
  std::vector<OptimizerSegment> segments = {{0, 0, 0, a, TensorId::wte},
                                            {a, a, a, b, TensorId::fcw, /*by_muon=*/true},
                                            {a + b, a + b, a + b, c, TensorId::ln1b}};
  AdamWConfig cfg;
  cfg.weight_decay = 0.1f;
  AdamW adam(cfg, model, segments, n);
  EXPECT_EQ(int64_t(adam.first_moment().extent(0)), n);
  EXPECT_EQ(int64_t(adam.second_moment().extent(0)), a + c);
  EXPECT_EQ(adam.state_bytes(), int64_t(sizeof(float)) * (n + a + c));
  EXPECT_EQ(adam.segments()[0].v_state, 0);
  EXPECT_EQ(adam.segments()[2].v_state, a);
  Slab p = random_slab("p", n), g = random_slab("g", n);
  std::vector<double> hp(n), m(n, 0.0), v(n, 0.0);
  const std::vector<float> p0 = to_host(p), hg = to_host(g);
  for (int64_t i = 0; i < n; ++i) hp[i] = p0[i];
  const float lr = 1e-2f, scale = 0.5f;
  auto muon = [&](int64_t i) { return i >= a && i < a + b; };
  const double b1 = 0.9f, b2 = 0.999f;  // the kernel's float betas (v is compared too)
  for (int step = 1; step <= 2; ++step) {
    adam.step(p.data(), g.data(), lr, scale);
    for (int64_t i = 0; i < n; ++i) {
      if (muon(i)) continue;
      const double gi = double(hg[i]) * scale, wd = i < a ? 0.1 : 0.0;
      m[i] = b1 * m[i] + (1 - b1) * gi;
      v[i] = b2 * v[i] + (1 - b2) * gi * gi;
      const double mhat = m[i] / (1 - std::pow(b1, step)), vhat = v[i] / (1 - std::pow(b2, step));
      hp[i] -= lr * (mhat / (std::sqrt(vhat) + 1e-8) + wd * hp[i]);
    }
  }
  expect_close(to_host(p), hp, 1e-6, "parameters after two AdamW steps around a Muon segment");
  const std::vector<float> hm = to_host(adam.first_moment()), hv = to_host(adam.second_moment());
  std::vector<double> packed;
  for (int64_t i = 0; i < n; ++i) {
    if (muon(i)) {
      ASSERT_EQ(hm[size_t(i)], 0.0f) << i;  // Muon's momentum, AdamW's to keep, not to update
    } else {
      packed.push_back(v[size_t(i)]);
    }
  }
  expect_close(hv, packed, 1e-6, "the second moment, AdamW's segments packed");
}

// The routing's counting sort and balance statistics against serial loops, on choices that leave
// experts without tokens, slots not a multiple of the sort's blocks, more slots than the host
// splits over threads, and fewer slots than experts.
TEST_P(Kernels, MoeSortAndBalanceStatsAgainstSerialLoops) {
  struct Case {
    int seqs, T, k, E;
    std::vector<int> unused;
  };
  for (const Case& c :
       {Case{3, 45, 3, 9, {2, 7}}, Case{2, 1250, 2, 16, {0, 15}}, Case{1, 1, 2, 8, {}}}) {
    MoeShape s;
    s.rows = int64_t(c.seqs) * c.T;
    s.seqs = c.seqs;
    s.E = c.E;
    s.k = c.k;
    const int64_t slots = s.slots();
    // Each token's k distinct experts, drawn among the used ones, expert 1 the most often.
    std::vector<int> used;
    for (int e = 0; e < c.E; ++e) {
      if (std::find(c.unused.begin(), c.unused.end(), e) == c.unused.end()) used.push_back(e);
    }
    std::vector<int32_t> choice(static_cast<size_t>(slots));
    uint64_t x = 12345;
    for (int64_t n = 0; n < s.rows; ++n) {
      for (int j = 0; j < c.k; ++j) {
        int32_t e;
        do {
          x = x * 6364136223846793005ull + 1442695040888963407ull;
          const int r = int((x >> 33) % uint64_t(used.size() + 3));
          e = used[size_t(r < int(used.size()) ? r : 1)];
        } while (std::find(&choice[n * c.k], &choice[n * c.k + j], e) != &choice[n * c.k + j]);
        choice[size_t(n * c.k + j)] = e;
      }
    }
    const Tokens dchoice = tokens_from_host(choice);
    Tokens counts("counts", c.E), order("order", slots), where("where", slots);
    Slab probs = random_slab("probs", s.rows * c.E), stats("stats", 2 * c.seqs * c.E);
    const std::vector<int64_t> host_counts =
        moe_sort(counts.data(), order.data(), where.data(), dchoice.data(), s);
    moe_balance_stats(view(stats), view(probs), dchoice.data(), s);

    // A stable sort by expert; the statistics a cell at a time, the tokens in order in float.
    std::vector<int32_t> want_counts(size_t(c.E), 0), want_order,
        want_where(static_cast<size_t>(slots));
    for (int e = 0; e < c.E; ++e) {
      for (int64_t i = 0; i < slots; ++i) {
        if (choice[size_t(i)] != e) continue;
        want_where[size_t(i)] = int32_t(want_order.size());
        want_order.push_back(int32_t(i));
        ++want_counts[size_t(e)];
      }
    }
    const std::vector<float> p = to_host(probs), got = to_host(stats);
    std::vector<float> want_count(size_t(c.seqs * c.E)), want_p(size_t(c.seqs * c.E));
    for (int b = 0; b < c.seqs; ++b) {
      for (int e = 0; e < c.E; ++e) {
        float n = 0.0f, sum = 0.0f;
        for (int64_t t = int64_t(b) * c.T; t < int64_t(b + 1) * c.T; ++t) {
          sum += p[size_t(t * c.E + e)];
          for (int j = 0; j < c.k; ++j) n += choice[size_t(t * c.k + j)] == e ? 1.0f : 0.0f;
        }
        want_count[size_t(b * c.E + e)] = n;
        want_p[size_t(b * c.E + e)] = sum;
      }
    }
    const std::string what = "E " + std::to_string(c.E) + ", " + std::to_string(slots) + " slots";
    for (int e : c.unused) EXPECT_EQ(want_counts[size_t(e)], 0) << what;
    EXPECT_EQ(ints_to_host(counts), want_counts) << what;
    EXPECT_EQ(std::vector<int64_t>(want_counts.begin(), want_counts.end()), host_counts) << what;
    EXPECT_EQ(ints_to_host(order), want_order) << what;
    EXPECT_EQ(ints_to_host(where), want_where) << what;
    const std::vector<float> got_count(got.begin(), got.begin() + c.seqs * c.E),
        got_p(got.begin() + c.seqs * c.E, got.end());
    EXPECT_EQ(got_count, want_count) << what;
    if (GetParam() == KernelShape::kHost) {
      // The host shape adds each cell's tokens in order: the serial loop's bits.
      EXPECT_EQ(bits_of(got_p), bits_of(want_p)) << what;
    } else {
      // The device shape adds blocks of tokens, then the blocks in order.
      expect_close(got_p, std::vector<double>(want_p.begin(), want_p.end()), 1e-6, "sum of p");
    }
  }
}

// vmath::rows_max and rows_sum (the fused attention's softmax, 16 rows at once) give each row's
// row_max and row_sum bit for bit: rows of 16 to 64 values, partial blocks, masked (−∞) entries,
// both signs.
TEST(RowReductions, ManyRowsAtOnceHaveOneRowsBits) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const int ld = 80;
  std::vector<float> x(size_t(vmath::kLanes) * ld);
  int checked = 0;
  for (int trial = 0; trial < 400; ++trial) {
    for (float& v : x) v = std::exp(normal(rng)) * (trial % 3 ? 1.0f : -1.0f);
    if (trial % 5 == 0) {
      for (int i = 0; i < 40; ++i) x[rng() % x.size()] = -INFINITY;
    }
    const int n = vmath::kLanes * (1 + trial % 4), rows = 1 + trial % vmath::kLanes;
    float mx[vmath::kLanes], sum[vmath::kLanes];
    vmath::rows_max(x.data(), ld, n, rows, mx);
    vmath::rows_sum(x.data(), ld, n, rows, sum);
    for (int r = 0; r < rows; ++r, ++checked) {
      const float want_max = vmath::row_max(x.data() + r * ld, n);
      const float want_sum = vmath::row_sum(x.data() + r * ld, n);
      ASSERT_EQ(0, std::memcmp(&want_max, &mx[r], sizeof(float))) << "trial " << trial;
      ASSERT_EQ(0, std::memcmp(&want_sum, &sum[r], sizeof(float))) << "trial " << trial;
    }
  }
  EXPECT_GT(checked, 3000);
}

// The inverse frequencies and the cos and sin tables against the formulas in double: Hugging
// Face's default and Llama 3.1's "llama3" rope scaling (Llama 3.2's settings: factor 32).
TEST(RopeTables, InverseFrequencies) {
  const double theta = 500000.0;
  const int hs = 64;
  const std::vector<float> plain = rope_inverse_frequencies(hs, theta, RopeScaling{});
  ASSERT_EQ(plain.size(), size_t(hs / 2));
  for (int i = 0; i < hs / 2; ++i) {
    EXPECT_NEAR(plain[i], std::pow(theta, -2.0 * i / hs), 1e-6 * std::pow(theta, -2.0 * i / hs))
        << i;
  }
  // An exponent 2i/hs that float cannot hold exactly (hs = 10).
  const std::vector<float> odd = rope_inverse_frequencies(10, 10000.0, RopeScaling{});
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(odd[i], std::pow(1e4, -0.2 * i), 2e-6) << i;

  RopeScaling s;
  s.factor = 32;
  s.low_freq_factor = 1;
  s.high_freq_factor = 4;
  s.original_max_position = 8192;
  const std::vector<float> scaled = rope_inverse_frequencies(hs, theta, s);
  int kept = 0, divided = 0, smoothed = 0;
  for (int i = 0; i < hs / 2; ++i) {
    const double f = std::pow(theta, -2.0 * i / hs), wavelen = 2 * M_PI / f;
    double want = f;
    if (wavelen > 8192.0) {
      want = f / 32;
      ++divided;
    } else if (wavelen >= 2048.0) {
      const double smooth = (8192.0 / wavelen - 1.0) / 3.0;
      want = (1 - smooth) * f / 32 + smooth * f;
      ++smoothed;
    } else {
      ++kept;
    }
    EXPECT_NEAR(scaled[i], want, 1e-5 * want) << i;
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(smoothed, 0);
}

TEST(RopeTables, CosAndSinOfEveryPosition) {
  const int hs = 16, half = hs / 2, max_pos = 300;
  for (const float factor : {0.0f, 8.0f}) {
    RopeScaling s;
    s.factor = factor;
    s.original_max_position = 64;
    const std::vector<float> inv = rope_inverse_frequencies(hs, 10000.0, s);
    Slab c("cos", max_pos * half), sn("sin", max_pos * half);
    rope_tables(view(c), view(sn), inv, max_pos);
    const std::vector<float> hc = to_host(c), hsn = to_host(sn);
    for (int p = 0; p < max_pos; ++p) {
      for (int i = 0; i < half; ++i) {
        // The angle is formed in float32, as PyTorch forms it: off by half an ulp of p·inv at most.
        const double angle = double(p) * inv[i], tol = angle * 0x1p-24 + 1e-7;
        EXPECT_NEAR(hc[p * half + i], std::cos(angle), tol) << "cos at " << p << ", " << i;
        EXPECT_NEAR(hsn[p * half + i], std::sin(angle), tol) << "sin at " << p << ", " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(BothShapes, Kernels,
                         ::testing::Values(KernelShape::kHost, KernelShape::kDevice),
                         [](const ::testing::TestParamInfo<KernelShape>& info) {
                           return info.param == KernelShape::kHost ? "HostShape" : "DeviceShape";
                         });

}  // namespace mpf
