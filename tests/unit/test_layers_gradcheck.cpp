// Each layer's input gradient (B) and weight gradient (W) against central finite differences of
// the scalar loss Σ out·R, R random: its gradient w.r.t. out is R, so dout = R.
#include <gtest/gtest.h>

#include <string>

#include "model/layers/attention.hpp"
#include "model/layers/cross_entropy.hpp"
#include "model/layers/encoder.hpp"
#include "model/layers/gelu.hpp"
#include "model/layers/layernorm.hpp"
#include "model/layers/linear.hpp"
#include "model/layers/projection_norm.hpp"
#include "model/layers/rmsnorm.hpp"
#include "model/layers/rope.hpp"
#include "model/layers/swiglu.hpp"
#include "test_helpers.hpp"

namespace mpf {

using test::expect_gradient_matches;
using test::random_slab;
using test::spread;
using test::to_host;
using test::view;
using test::weighted_sum;

TEST(LayerGradients, Linear) {
  const int N = 6, IC = 5, OC = 7;
  Slab inp = random_slab("inp", N * IC), w = random_slab("w", OC * IC, 0.5f),
       b = random_slab("b", OC), res = random_slab("res", N * OC), out("out", N * OC);
  const std::vector<float> R = to_host(random_slab("R", N * OC));
  Slab dout("dout", N * OC), dinp("dinp", N * IC), dw("dw", OC * IC), db("db", OC);
  Kokkos::deep_copy(
      dout, Kokkos::View<const float*, HostSpace, Kokkos::MemoryUnmanaged>(R.data(), R.size()));
  auto loss = [&] {
    linear_forward(view(out), view(res), view(inp), view(w), view(b), N, IC, OC);
    return weighted_sum(out, R);
  };
  loss();
  linear_backward_input(view(dinp), view(dout), view(w), N, IC, OC);
  linear_backward_weight(view(dw), view(db), view(dout), view(inp), N, IC, OC);
  expect_gradient_matches(inp, to_host(dinp), loss, spread(N * IC), "dinp");
  expect_gradient_matches(w, to_host(dw), loss, spread(OC * IC), "dweight");
  expect_gradient_matches(b, to_host(db), loss, spread(OC), "dbias");
  expect_gradient_matches(res, R, loss, spread(N * OC), "dresidual");
  // Weight gradients accumulate: a second call doubles them.
  const std::vector<float> once = to_host(dw);
  linear_backward_weight(view(dw), view(db), view(dout), view(inp), N, IC, OC);
  const std::vector<float> twice = to_host(dw);
  for (size_t i = 0; i < once.size(); ++i) ASSERT_FLOAT_EQ(twice[i], 2 * once[i]);
}

TEST(LayerGradients, LayerNorm) {
  const int N = 5, C = 12;
  Slab inp = random_slab("inp", N * C, 2.0f), w = random_slab("w", C), b = random_slab("b", C);
  Slab out("out", N * C), mean("mean", N), rstd("rstd", N);
  const std::vector<float> R = to_host(random_slab("R", N * C));
  const std::vector<float> D = to_host(random_slab("D", N * C));  // residual stream gradient
  Slab dout("dout", N * C), dres("dres", N * C), dinp("dinp", N * C), dw("dw", C), db("db", C);
  Kokkos::deep_copy(
      dout, Kokkos::View<const float*, HostSpace, Kokkos::MemoryUnmanaged>(R.data(), R.size()));
  Kokkos::deep_copy(
      dres, Kokkos::View<const float*, HostSpace, Kokkos::MemoryUnmanaged>(D.data(), D.size()));
  // loss = Σ out·R + Σ inp·D, so dinp = J_outᵀ·R + D.
  auto loss = [&] {
    layernorm_forward(view(out), view(mean), view(rstd), view(inp), view(w), view(b), N, C);
    return weighted_sum(out, R) + weighted_sum(inp, D);
  };
  loss();
  layernorm_backward_input(view(dinp), view(dres), view(dout), view(inp), view(mean), view(rstd),
                           view(w), N, C);
  layernorm_backward_weight(view(dw), view(db), view(dout), view(inp), view(mean), view(rstd), N,
                            C);
  expect_gradient_matches(inp, to_host(dinp), loss, spread(N * C), "dinp", 1e-2f);
  expect_gradient_matches(w, to_host(dw), loss, spread(C), "dweight");
  expect_gradient_matches(b, to_host(db), loss, spread(C), "dbias");
}

TEST(LayerGradients, Gelu) {
  const int N = 64;
  Slab inp = random_slab("inp", N, 2.0f), out("out", N);
  const std::vector<float> R = to_host(random_slab("R", N));
  Slab dout("dout", N), dinp("dinp", N);
  Kokkos::deep_copy(
      dout, Kokkos::View<const float*, HostSpace, Kokkos::MemoryUnmanaged>(R.data(), R.size()));
  auto loss = [&] {
    gelu_forward(view(out), view(inp), N);
    return weighted_sum(out, R);
  };
  loss();
  gelu_backward_input(view(dinp), view(dout), view(inp), N);
  expect_gradient_matches(inp, to_host(dinp), loss, spread(N), "dinp", 1e-3f);
}

TEST(LayerGradients, CausalAttention) {
  const int B = 2, T = 5, C = 8, NH = 2, hs = C / NH;
  Slab qkv = random_slab("qkv", B * T * 3 * C), out("out", B * T * C), lse("lse", B * NH * T);
  const std::vector<float> R = to_host(random_slab("R", B * T * C));
  Slab dout("dout", B * T * C), dqkv("dqkv", B * T * 3 * C), delta("delta", B * NH * T);
  Kokkos::deep_copy(
      dout, Kokkos::View<const float*, HostSpace, Kokkos::MemoryUnmanaged>(R.data(), R.size()));
  auto loss = [&] {
    attention_forward(view(out), view(lse), view(qkv), B, T, NH, NH, hs);
    return weighted_sum(out, R);
  };
  loss();
  // Causality: changing the last position's q, k and v leaves every earlier output as it was.
  const std::vector<float> before = to_host(out);
  auto h = Kokkos::create_mirror_view_and_copy(HostSpace(), qkv);
  for (int b = 0; b < B; ++b) {
    for (int c = 0; c < 3 * C; ++c) h((b * T + T - 1) * 3 * C + c) += 1.0f;
  }
  Slab moved("moved", B * T * 3 * C);
  Kokkos::deep_copy(moved, h);
  attention_forward(view(out), view(lse), view(moved), B, T, NH, NH, hs);
  const std::vector<float> after = to_host(out);
  for (int b = 0; b < B; ++b) {
    for (int i = 0; i < (T - 1) * C; ++i) EXPECT_EQ(before[b * T * C + i], after[b * T * C + i]);
  }
  loss();
  attention_backward_input(view(dqkv), view(delta), view(dout), view(qkv), view(out), view(lse), B,
                           T, NH, NH, hs);
  expect_gradient_matches(qkv, to_host(dqkv), loss, spread(B * T * 3 * C, 240), "dqkv");
}

TEST(LayerGradients, RMSNorm) {
  const int N = 5, C = 12;
  Slab inp = random_slab("inp", N * C, 2.0f), w = random_slab("w", C);
  Slab out("out", N * C), rstd("rstd", N);
  const std::vector<float> R = to_host(random_slab("R", N * C));
  const std::vector<float> D = to_host(random_slab("D", N * C));  // residual stream gradient
  Slab dout("dout", N * C), dres("dres", N * C), dinp("dinp", N * C), dw("dw", C);
  Kokkos::deep_copy(
      dout, Kokkos::View<const float*, HostSpace, Kokkos::MemoryUnmanaged>(R.data(), R.size()));
  Kokkos::deep_copy(
      dres, Kokkos::View<const float*, HostSpace, Kokkos::MemoryUnmanaged>(D.data(), D.size()));
  // loss = Σ out·R + Σ inp·D, so dinp = J_outᵀ·R + D.
  auto loss = [&] {
    rmsnorm_forward(view(out), view(rstd), view(inp), view(w), N, C, 1e-5f);
    return weighted_sum(out, R) + weighted_sum(inp, D);
  };
  loss();
  rmsnorm_backward_input(view(dinp), view(dres), view(dout), view(inp), view(rstd), view(w), N, C);
  rmsnorm_backward_weight(view(dw), view(dout), view(inp), view(rstd), N, C);
  expect_gradient_matches(inp, to_host(dinp), loss, spread(N * C), "dinp", 1e-2f);
  expect_gradient_matches(w, to_host(dw), loss, spread(C), "dweight");
  // Without a residual the gradient is the normalisation's alone, written in place of dout.
  rmsnorm_backward_input(view(dout), Tensor(), view(dout), view(inp), view(rstd), view(w), N, C);
  const std::vector<float> alone = to_host(dout), with = to_host(dinp);
  for (int i = 0; i < N * C; ++i) EXPECT_NEAR(alone[i], with[i] - D[i], 1e-5f) << i;
}

// OLMo-2's norms of the whole Q and K projections, on one rank: each row's 12 Q values and 6 K
// values of a packed [Q | K | V] row of 24 normalised apart, V untouched.
TEST(LayerGradients, ProjectionRMSNorm) {
  const int N = 5, Q = 12, K = 6, LD = Q + 2 * K;
  const ProjectionNormShape shape{N, LD, Q, K, Q, K, 0, 0, 1};
  Slab inp = random_slab("inp", N * LD, 2.0f), qw = random_slab("qw", Q), kw = random_slab("kw", K);
  Slab qkv("qkv", N * LD), raw("raw", N * (Q + K)), rstd("rstd", 2 * N), sums("sums", 2 * N);
  Slab dqkv("dqkv", N * LD), dw("dw", Q + K);
  const std::vector<float> R = to_host(random_slab("R", N * LD));
  auto loss = [&] {
    Kokkos::deep_copy(qkv, inp);
    projection_rmsnorm_forward(view(qkv), view(raw), view(rstd), view(qw), view(kw), shape, 1e-5f,
                               MPI_COMM_SELF);
    return weighted_sum(qkv, R);
  };
  loss();
  Kokkos::deep_copy(
      dqkv, Kokkos::View<const float*, HostSpace, Kokkos::MemoryUnmanaged>(R.data(), R.size()));
  projection_rmsnorm_backward_weight(view(dw), view(dqkv), view(raw), view(rstd), shape);
  projection_rmsnorm_backward_input(view(dqkv), view(sums), view(raw), view(rstd), view(qw),
                                    view(kw), shape, MPI_COMM_SELF);
  expect_gradient_matches(inp, to_host(dqkv), loss, spread(N * LD), "dqkv", 1e-2f);
  const std::vector<float> dweights = to_host(dw);
  expect_gradient_matches(qw, std::vector<float>(dweights.begin(), dweights.begin() + Q), loss,
                          spread(Q), "dq_weight");
  expect_gradient_matches(kw, std::vector<float>(dweights.begin() + Q, dweights.end()), loss,
                          spread(K), "dk_weight");
}

TEST(LayerGradients, RotaryEmbeddingOfQueriesAndKeys) {
  // Two sequences of T = 3 rows starting at position 2, NH = 4 query heads, KVH = 2 KV heads.
  const int B = 2, T = 3, pos0 = 2, NH = 4, KVH = 2, hs = 6, W = (NH + 2 * KVH) * hs;
  const int rows = B * T, max_pos = pos0 + T;
  Slab cos_t("cos", max_pos * hs / 2), sin_t("sin", max_pos * hs / 2);
  rope_tables(view(cos_t), view(sin_t), rope_inverse_frequencies(hs, 10000.0, RopeScaling{}),
              max_pos);
  Slab qkv = random_slab("qkv", rows * W), work("work", rows * W);
  const std::vector<float> R = to_host(random_slab("R", rows * W));
  auto loss = [&] {
    Kokkos::deep_copy(work, qkv);
    rope_forward(view(work), view(cos_t), view(sin_t), rows, T, pos0, NH, KVH, hs);
    return weighted_sum(work, R);
  };
  loss();
  // V is untouched.
  const std::vector<float> before = to_host(qkv), after = to_host(work);
  for (int n = 0; n < rows; ++n) {
    for (int c = (NH + KVH) * hs; c < W; ++c) ASSERT_EQ(after[n * W + c], before[n * W + c]);
  }
  Slab dqkv("dqkv", rows * W);
  Kokkos::deep_copy(
      dqkv, Kokkos::View<const float*, HostSpace, Kokkos::MemoryUnmanaged>(R.data(), R.size()));
  rope_backward(view(dqkv), view(cos_t), view(sin_t), rows, T, pos0, NH, KVH, hs);
  expect_gradient_matches(qkv, to_host(dqkv), loss, spread(rows * W), "dqkv", 1e-2f);
  // The backward is the inverse rotation: it undoes the forward.
  loss();
  rope_backward(view(work), view(cos_t), view(sin_t), rows, T, pos0, NH, KVH, hs);
  const std::vector<float> back = to_host(work);
  for (int i = 0; i < rows * W; ++i) EXPECT_NEAR(back[i], before[i], 1e-6f) << i;
}

TEST(LayerGradients, SwiGLU) {
  const int N = 4, F = 9;
  Slab inp = random_slab("inp", N * 2 * F, 2.0f), out("out", N * F);
  const std::vector<float> R = to_host(random_slab("R", N * F));
  Slab dout("dout", N * F), dinp("dinp", N * 2 * F);
  Kokkos::deep_copy(
      dout, Kokkos::View<const float*, HostSpace, Kokkos::MemoryUnmanaged>(R.data(), R.size()));
  auto loss = [&] {
    swiglu_forward(view(out), view(inp), N, F);
    return weighted_sum(out, R);
  };
  loss();
  swiglu_backward_input(view(dinp), view(dout), view(inp), N, F);
  expect_gradient_matches(inp, to_host(dinp), loss, spread(N * 2 * F), "dinp (gate | up)", 1e-3f);
}

// Grouped-query attention: 4 query heads over 1 or 2 KV heads; the KV heads' gradients sum over
// their group's query heads.
class GroupedAttentionGradient : public ::testing::TestWithParam<int> {};

TEST_P(GroupedAttentionGradient, MatchesFiniteDifferences) {
  const int B = 2, T = 5, NH = 4, KVH = GetParam(), hs = 4, W = (NH + 2 * KVH) * hs, Cq = NH * hs;
  Slab qkv = random_slab("qkv", B * T * W), out("out", B * T * Cq), lse("lse", B * NH * T);
  const std::vector<float> R = to_host(random_slab("R", B * T * Cq));
  Slab dout("dout", B * T * Cq), dqkv("dqkv", B * T * W), delta("delta", B * NH * T);
  Kokkos::deep_copy(
      dout, Kokkos::View<const float*, HostSpace, Kokkos::MemoryUnmanaged>(R.data(), R.size()));
  auto loss = [&] {
    attention_forward(view(out), view(lse), view(qkv), B, T, NH, KVH, hs);
    return weighted_sum(out, R);
  };
  loss();
  attention_backward_input(view(dqkv), view(delta), view(dout), view(qkv), view(out), view(lse), B,
                           T, NH, KVH, hs);
  expect_gradient_matches(qkv, to_host(dqkv), loss, spread(B * T * W, 240), "dqkv");
}

INSTANTIATE_TEST_SUITE_P(KvHeads, GroupedAttentionGradient, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "KVH" + std::to_string(info.param);
                         });

TEST(LayerGradients, CrossEntropyIgnoresPaddedColumns) {
  const int N = 4, V = 11, Vp = 16;
  const float dloss = 0.37f;
  // The forward overwrites its input with probabilities: each evaluation works on a copy.
  Slab logits = random_slab("logits", N * Vp, 3.0f), work("work", N * Vp), losses("losses", N),
       stats("stats", 3 * N);
  Tokens targets("targets", N);
  auto ht = Kokkos::create_mirror_view(targets);
  for (int n = 0; n < N; ++n) ht(n) = (3 * n + 2) % V;
  Kokkos::deep_copy(targets, ht);
  auto loss = [&] {
    Kokkos::deep_copy(work, logits);
    cross_entropy_forward(view(losses), view(work), view(stats), targets, N, V, 0, Vp,
                          MPI_COMM_SELF);
    const std::vector<float> l = to_host(losses);
    double s = 0;
    for (float x : l) s += dloss * double(x);
    return s;
  };
  loss();
  Slab dlogits("dlogits", N * Vp);
  cross_entropy_backward_input(view(dlogits), view(work), targets, dloss, N, 0, Vp);
  const std::vector<float> d = to_host(dlogits);
  expect_gradient_matches(logits, d, loss, spread(N * Vp, 64), "dlogits", 1e-2f);
  for (int n = 0; n < N; ++n) {
    for (int j = V; j < Vp; ++j) EXPECT_EQ(d[n * Vp + j], 0.0f);
  }
}

TEST(LayerGradients, EncoderWeights) {
  const int B = 2, T = 3, C = 4, V = 6, maxT = 5;
  Slab wte = random_slab("wte", V * C), wpe = random_slab("wpe", maxT * C), out("out", B * T * C);
  Tokens tokens("tokens", B * T);
  auto ht = Kokkos::create_mirror_view(tokens);
  const int ids[] = {1, 4, 1, 5, 1, 0};  // token 1 repeats: its gradient rows must add
  for (int i = 0; i < B * T; ++i) ht(i) = ids[i];
  Kokkos::deep_copy(tokens, ht);
  const std::vector<float> R = to_host(random_slab("R", B * T * C));
  Slab dout("dout", B * T * C), dwte("dwte", V * C), dwpe("dwpe", maxT * C);
  Kokkos::deep_copy(
      dout, Kokkos::View<const float*, HostSpace, Kokkos::MemoryUnmanaged>(R.data(), R.size()));
  auto loss = [&] {
    encoder_forward(view(out), tokens, view(wte), view(wpe), B, T, C, 0, V, true);
    return weighted_sum(out, R);
  };
  loss();
  encoder_backward_weight(view(dwte), view(dwpe), view(dout), tokens, B, T, C, 0, V);
  expect_gradient_matches(wte, to_host(dwte), loss, spread(V * C), "dwte");
  expect_gradient_matches(wpe, to_host(dwpe), loss, spread(maxT * C), "dwpe");
}

}  // namespace mpf
