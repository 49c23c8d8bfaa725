// Each layer's input gradient (B) and weight gradient (W) against central finite differences of
// the scalar loss Σ out·R, R random: its gradient w.r.t. out is R, so dout = R.
#include <gtest/gtest.h>

#include <string>

#include "backends/gemm.hpp"
#include "layout/layout_memory.hpp"
#include "model/gpt.hpp"
#include "model/layers/attention.hpp"
#include "model/layers/cross_entropy.hpp"
#include "model/layers/encoder.hpp"
#include "model/layers/gelu.hpp"
#include "model/layers/layernorm.hpp"
#include "model/layers/linear.hpp"
#include "model/layers/matmul.hpp"
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
  // Without a dloss the forward leaves its input as it is; each evaluation works on a copy all
  // the same.
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
  Kokkos::deep_copy(dlogits, logits);
  cross_entropy_gradient(view(dlogits), view(stats), targets, dloss, N, V, 0, Vp);
  const std::vector<float> d = to_host(dlogits);
  expect_gradient_matches(logits, d, loss, spread(N * Vp, 64), "dlogits", 1e-2f);
  for (int n = 0; n < N; ++n) {
    for (int j = V; j < Vp; ++j) EXPECT_EQ(d[n * Vp + j], 0.0f);
  }
}

// The LM head's classifier in the model: a training step's forward, knowing dloss, writes the
// logits' gradient in the loss's pass; without it (an evaluation, or dloss not known) the backward
// makes it from the kept logits and row statistics. The same losses and gradients bit for bit,
// with the logits whole or in pieces, in fp32 and (fp32 logits, or bf16 ones as autocast keeps
// them) under bf16 products.
namespace {
struct HeadStep {
  std::vector<float> losses, grads;
};
HeadStep head_step(const GPTConfig& cfg, bool one_pass, int logit_rows, bool bf16_products,
                   bool bf16_logits) {
  const int B = 2, T = 6;
  const float dloss = 1.0f / (B * T);
  const TpShard shard = make_tp_shard(cfg, 0, 1);
  Parameters params = Parameters::allocate(shard, "params"),
             grads = Parameters::allocate(shard, "g");
  initialize(params, shard, 11);
  ChunkPieces chunk = whole_stage(shard);
  chunk.logit_rows = logit_rows;
  chunk.bf16 = bf16_logits;
  Activations acts = Activations::allocate(shard, chunk, B, T);
  BackwardBuffers buf = BackwardBuffers::allocate(shard, B, T);
  WeightGradInputs w = WeightGradInputs::allocate(shard, chunk, B, T);
  std::vector<int32_t> ids(B * T), next(B * T);
  for (int i = 0; i < B * T; ++i)
    ids[i] = (7 * i + 3) % cfg.vocab, next[i] = (5 * i + 1) % cfg.vocab;
  Tokens inputs("inputs", B * T), targets("targets", B * T);
  Kokkos::deep_copy(inputs, Kokkos::View<const int32_t*, HostSpace, Kokkos::MemoryUnmanaged>(
                                ids.data(), ids.size()));
  Kokkos::deep_copy(targets, Kokkos::View<const int32_t*, HostSpace, Kokkos::MemoryUnmanaged>(
                                 next.data(), next.size()));
  Bf16Slab weights16("weights16", params.count);
  round_to_bf16(weights16.data(), params.slab.data(), params.count);
  std::unique_ptr<Bf16Products> scope;
  if (bf16_products) {
    scope = std::make_unique<Bf16Products>(params.slab.data(), weights16.data(), params.count, 16);
  }
  acts.forward_dloss = one_pass ? dloss : 0.0f;
  gpt_forward(acts, params.t, inputs, targets);
  if (logit_rows > 0) {
    gpt_backward_by_block(grads.t, buf, w, acts, params.t, inputs, targets, dloss, MPI_COMM_SELF,
                          {}, nullptr, {}, true);
  } else {
    gpt_backward(grads.t, buf, w, acts, params.t, inputs, targets, dloss);
  }
  return {to_host(Slab(acts.losses.data(), acts.losses.extent(0))), to_host(grads.slab)};
}
}  // namespace

TEST(ClassifierInTheModel, OnePassGivesTheBitsOfTwo) {
  const GPTConfig cfg{8, 13, 16, 2, 2, 8};  // V 13 padded to 16
  const bool bf16 = backend::kernels().bf16_missing.empty();
  for (const int products : {0, 1, 2}) {  // fp32; bf16 with fp32 logits; bf16 with bf16 logits
    if (products > 0 && !bf16) continue;
    for (const int logit_rows : {0, 5}) {
      SCOPED_TRACE("products " + std::to_string(products) + ", logit rows " +
                   std::to_string(logit_rows));
      const HeadStep two = head_step(cfg, false, logit_rows, products > 0, products == 2);
      const HeadStep one = head_step(cfg, true, logit_rows, products > 0, products == 2);
      EXPECT_EQ(one.losses, two.losses);
      EXPECT_EQ(one.grads, two.grads);
      if (logit_rows > 0) {
        const HeadStep whole = head_step(cfg, true, 0, products > 0, products == 2);
        EXPECT_EQ(whole.losses, one.losses);
      }
    }
  }
}

// Under bf16 the head's logits are kept in bf16, half the bytes, and the products' operand scratch
// no longer needs the vocabulary's width (the dlogits are bf16 already).
TEST(ClassifierInTheModel, Bf16LogitsTakeHalfTheBytes) {
  GPTConfig cfg{8, 500, 512, 2, 2, 8};
  const TpShard shard = make_tp_shard(cfg, 0, 1);
  const int B = 2, T = 6;
  const int64_t R = B * T, Vl = shard.vocab_shard;
  ChunkPieces c32 = whole_stage(shard), c16 = c32;
  c16.bf16 = true;
  const Activations a16 = Activations::allocate(shard, c16, B, T);
  EXPECT_EQ(a16.logits.extent(0), 0u);
  EXPECT_EQ(int64_t(a16.logits_bf16.extent(0)), R * Vl);
  // The head's share of each set: with and without it, in both precisions.
  ChunkPieces h32 = c32, h16 = c16;
  h32.head = h16.head = false;
  const int64_t head32 =
      Activations::bytes(shard, c32, B, T) - Activations::bytes(shard, h32, B, T);
  const int64_t head16 =
      Activations::bytes(shard, c16, B, T) - Activations::bytes(shard, h16, B, T);
  EXPECT_EQ(head32 - head16, 2 * R * Vl);
  EXPECT_LT(largest_bf16_operand(shard, int(R)), R * Vl);
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
