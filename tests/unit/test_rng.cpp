#include <gtest/gtest.h>

#include <cmath>

#include "core/rng.hpp"
#include "model/parameters.hpp"
#include "test_helpers.hpp"

namespace mpf {

TEST(Rng, SameCounterSameValue) {
  const uint64_t s = rng::stream_of("qkvw");
  EXPECT_EQ(rng::normal(42, s, 123456789), rng::normal(42, s, 123456789));
  EXPECT_NE(rng::normal(42, s, 1), rng::normal(42, s, 2));
  EXPECT_NE(rng::normal(42, s, 1), rng::normal(43, s, 1));
  EXPECT_NE(rng::normal(42, s, 1), rng::normal(42, rng::stream_of("fcw"), 1));
}

TEST(Rng, StandardNormalMoments) {
  const int n = 200000;
  double mean = 0, var = 0, beyond2 = 0;
  for (int i = 0; i < n; ++i) {
    const double x = rng::normal(1, 99, i);
    mean += x;
    var += x * x;
    beyond2 += std::fabs(x) > 2.0;
  }
  mean /= n;
  var = var / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(var, 1.0, 0.01);
  EXPECT_NEAR(beyond2 / n, 0.0455, 0.003);  // P(|z| > 2) for a standard normal
}

// Invariant 1: an element's initial value depends on (seed, name, index) only, not on the size
// of the rest of the model or the vocabulary padding.
TEST(Initialization, IndependentOfPaddingAndOtherTensors) {
  GPTConfig a{64, 50, 64, 2, 2, 8}, b{32, 50, 128, 3, 2, 8};
  Parameters pa = Parameters::allocate(a, "a"), pb = Parameters::allocate(b, "b");
  initialize(pa, 5);
  initialize(pb, 5);
  auto ha = Kokkos::create_mirror_view_and_copy(HostSpace(), pa.slab);
  auto hb = Kokkos::create_mirror_view_and_copy(HostSpace(), pb.slab);
  const int64_t wte_a = pa.t.wte.data() - pa.slab.data(), wte_b = pb.t.wte.data() - pb.slab.data();
  for (int64_t i = 0; i < 50 * 8; ++i) ASSERT_EQ(ha(wte_a + i), hb(wte_b + i));
  for (int64_t i = 50 * 8; i < 64 * 8; ++i) ASSERT_EQ(ha(wte_a + i), 0.0f) << "padded row";
  // Layers 0 and 1 of qkvw agree although b has a third layer.
  for (int l = 0; l < 2; ++l) {
    const int64_t qa = pa.t.blocks[l].qkvw.data() - pa.slab.data(),
                  qb = pb.t.blocks[l].qkvw.data() - pb.slab.data();
    for (int64_t i = 0; i < 3 * 8 * 8; ++i) ASSERT_EQ(ha(qa + i), hb(qb + i));
  }
}

TEST(Initialization, Gpt2Scheme) {
  GPTConfig cfg{64, 256, 256, 4, 4, 64};
  Parameters p = Parameters::allocate(cfg, "p");
  initialize(p, 1);
  auto stats = [&](const Tensor& t) {
    auto h = Kokkos::create_mirror_view_and_copy(HostSpace(), t);
    double s = 0, s2 = 0;
    for (size_t i = 0; i < h.extent(0); ++i) s += h(i), s2 += double(h(i)) * h(i);
    const double n = double(h.extent(0));
    return std::make_pair(s / n, std::sqrt(s2 / n - (s / n) * (s / n)));
  };
  for (const LayerParameters& b : p.t.blocks) {
    EXPECT_NEAR(stats(b.fcw).second, 0.02, 0.002);
    EXPECT_NEAR(stats(b.attprojw).second, 0.02 / std::sqrt(2.0 * cfg.layers), 0.001);
    EXPECT_EQ(stats(b.ln1w).first, 1.0);
    EXPECT_EQ(stats(b.ln1w).second, 0.0);
    EXPECT_EQ(stats(b.qkvb).first, 0.0);
  }
}

}  // namespace mpf
