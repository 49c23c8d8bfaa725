// AdamW against a scalar transcription of the update rule, over several steps, with the clipping
// factor and per-tensor weight decay.
#include <gtest/gtest.h>

#include <cmath>

#include "optim/adamw.hpp"
#include "test_helpers.hpp"

namespace mpf {

TEST(AdamW, MatchesTheScalarRuleOverSteps) {
  const int64_t n = 10000;
  Slab p = test::random_slab("p", n), g = test::random_slab("g", n, 0.1f);
  Slab m("m", n), v("v", n);
  std::vector<double> rp(n), rm(n, 0.0), rv(n, 0.0);
  const std::vector<float> p0 = test::to_host(p), g0 = test::to_host(g);
  for (int64_t i = 0; i < n; ++i) rp[i] = p0[i];
  const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, scale = 0.5f;
  for (int t = 1; t <= 3; ++t) {
    adamw_update(p.data(), g.data(), m.data(), v.data(), n, lr, b1, b2, eps, wd, scale, t);
    for (int64_t i = 0; i < n; ++i) {
      const double gi = double(g0[i]) * scale;
      rm[i] = b1 * rm[i] + (1 - b1) * gi;
      rv[i] = b2 * rv[i] + (1 - b2) * gi * gi;
      const double mhat = rm[i] / (1 - std::pow(b1, t)), vhat = rv[i] / (1 - std::pow(b2, t));
      rp[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + wd * rp[i]);
    }
  }
  const std::vector<float> got = test::to_host(p);
  for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], rp[i], 2e-6 * (1 + std::fabs(rp[i]))) << i;
}

// bf16 runs: the update writes the products' bf16 copy of the new parameters in the same pass,
// exactly what rounding them afterwards gives, and the fp32 update is unchanged by it.
TEST(AdamW, WritesTheBf16CopyOfTheUpdate) {
  const int64_t n = 5000;
  Slab p = test::random_slab("p", n), g = test::random_slab("g", n, 0.1f);
  Slab q("q", n), m("m", n), v("v", n), mq("mq", n), vq("vq", n);
  Kokkos::deep_copy(q, p);
  Bf16Slab p16("p16", n);
  for (int t = 1; t <= 2; ++t) {
    adamw_update(p.data(), g.data(), m.data(), v.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f,
                 t, p16.data());
    adamw_update(q.data(), g.data(), mq.data(), vq.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f,
                 t);
  }
  const std::vector<float> got = test::to_host(p), plain = test::to_host(q);
  auto h16 = Kokkos::create_mirror_view_and_copy(HostSpace(), p16);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(got[i], plain[i]) << i;
    ASSERT_EQ(h16(i), to_bf16(got[i])) << i;
  }
}

TEST(AdamW, DecaysMatricesOnly) {
  GPTConfig cfg{8, 16, 16, 1, 2, 8};
  Parameters params = Parameters::allocate(cfg, "p"), grads = Parameters::allocate(cfg, "g");
  Kokkos::deep_copy(params.slab, 1.0f);  // zero gradients: only the decay can move a parameter
  AdamWConfig c;
  c.weight_decay = 0.5f;
  AdamW opt(c, cfg, piece_segments(params), params.count);
  opt.step(params.slab.data(), grads.slab.data(), 0.1f, 1.0f);
  for (const SlabPiece& piece : params.layout.pieces()) {
    const TensorSpec& spec = tensor_spec(piece.tensor);
    auto h = Kokkos::create_mirror_view_and_copy(HostSpace(), params.view(piece));
    const float expected = spec.weight_decay ? 1.0f - 0.1f * 0.5f : 1.0f;
    for (size_t k = 0; k < h.extent(0); ++k) {
      ASSERT_FLOAT_EQ(h(k), expected) << spec.name << " block " << piece.block;
    }
  }
  EXPECT_EQ(opt.steps_taken(), 1);
}

// The second moment's layout: the first moment's, less the Muon segments' stretches, in the
// first moment's order whatever order the segments are listed in (a ZeRO shard's segments follow
// the buckets); without Muon it is the first moment's.
TEST(AdamW, SecondMomentTakesOutMuonSegmentsInStateOrder) {
  std::vector<OptimizerSegment> s(4);
  const int64_t states[4] = {30, 0, 10, 45}, lengths[4] = {10, 10, 20, 5};
  for (int k = 0; k < 4; ++k) {
    s[k].state = states[k];
    s[k].length = lengths[k];
  }
  std::vector<OptimizerSegment> adamw = s;
  EXPECT_EQ(second_moment_layout(adamw, 50), 50);
  for (const OptimizerSegment& x : adamw) EXPECT_EQ(x.v_state, x.state);
  s[0].by_muon = s[2].by_muon = true;  // [30, 40) and [10, 30)
  EXPECT_EQ(second_moment_layout(s, 50), 50 - 30);
  EXPECT_EQ(s[1].v_state, 0);
  EXPECT_EQ(s[3].v_state, 45 - 30);
}

}  // namespace mpf
