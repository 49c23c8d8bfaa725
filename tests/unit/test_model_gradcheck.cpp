// The whole model's gradient (every piece's B, then every piece's W, as gpt_backward does) against
// finite differences of the mean loss, on a tiny model with O(1) weights so every path carries
// signal.
#include <gtest/gtest.h>

#include "model/gpt.hpp"
#include "test_helpers.hpp"

namespace mpf {

namespace {
struct TinyModel {
  GPTConfig cfg{8, 13, 16, 2, 2, 8};  // maxT 8, V 13 padded to 16, L 2, NH 2, C 8
  int B = 2, T = 5;
  Parameters params = Parameters::allocate(cfg, "params");
  Parameters grads = Parameters::allocate(cfg, "grads");
  Activations acts = Activations::allocate(cfg, B, T);
  BackwardBuffers buf = BackwardBuffers::allocate(cfg, B, T);
  WeightGradInputs w = WeightGradInputs::allocate(cfg, B, T);
  Tokens inputs{"inputs", 10}, targets{"targets", 10};

  TinyModel() {
    Slab noise = test::random_slab("noise", params.count, 0.3f);
    auto hp = Kokkos::create_mirror_view_and_copy(HostSpace(), noise);
    int64_t off = 0;
    for (const TensorSpec& spec : kTensors) {
      // LayerNorm weights near 1, like a trained model; everything else O(0.3).
      const int64_t n = tensor_size(spec.id, cfg);
      if (spec.init == TensorInit::kOne) {
        for (int64_t j = 0; j < n; ++j) hp(off + j) += 1.0f;
      }
      off += n;
    }
    // Padded token rows are zero, as in a checkpoint.
    for (int64_t j = int64_t(cfg.vocab) * cfg.channels;
         j < int64_t(cfg.padded_vocab) * cfg.channels; ++j)
      hp(j) = 0;
    Kokkos::deep_copy(params.slab, hp);
    auto hi = Kokkos::create_mirror_view(inputs);
    auto ht = Kokkos::create_mirror_view(targets);
    for (int i = 0; i < B * T; ++i)
      hi(i) = (7 * i + 3) % cfg.vocab, ht(i) = (5 * i + 1) % cfg.vocab;
    Kokkos::deep_copy(inputs, hi);
    Kokkos::deep_copy(targets, ht);
  }
  double mean_loss() {
    gpt_forward(acts, params.t, inputs, targets);
    const std::vector<float> l = test::to_host(Slab(acts.losses.data(), acts.losses.extent(0)));
    double s = 0;
    for (float x : l) s += x;
    return s / (B * T);
  }
  void backward() {
    mean_loss();
    gpt_backward(grads.t, buf, w, acts, params.t, inputs, targets, 1.0f / (B * T));
  }
};
}  // namespace

TEST(ModelGradients, EveryParameterTensorMatchesFiniteDifferences) {
  TinyModel m;
  Kokkos::deep_copy(m.grads.slab, 0.0f);
  m.backward();
  const std::vector<float> g = test::to_host(m.grads.slab);
  int64_t off = 0;
  for (const TensorSpec& spec : kTensors) {
    const int64_t n = tensor_size(spec.id, m.cfg);
    std::vector<int64_t> idx;
    for (int64_t j : test::spread(n, 24)) idx.push_back(off + j);
    test::expect_gradient_matches(
        m.params.slab, g, [&] { return m.mean_loss(); }, idx, spec.name, 1e-2f, 3e-2, 3e-3);
    off += n;
  }
  // The padded rows of the tied embedding get no gradient from either use.
  for (int64_t j = int64_t(m.cfg.vocab) * m.cfg.channels;
       j < int64_t(m.cfg.padded_vocab) * m.cfg.channels; ++j) {
    ASSERT_EQ(g[j], 0.0f);
  }
}

TEST(ModelGradients, BackwardAccumulatesAndIsDeterministic) {
  TinyModel m;
  Kokkos::deep_copy(m.grads.slab, 0.0f);
  m.backward();
  const std::vector<float> once = test::to_host(m.grads.slab);
  m.backward();
  const std::vector<float> twice = test::to_host(m.grads.slab);
  // Bitwise equal up to the order of the additions into an already non-zero gradient.
  for (size_t i = 0; i < once.size(); ++i) {
    ASSERT_NEAR(twice[i], 2 * once[i], 1e-6f * (1 + std::fabs(once[i]))) << i;
  }
  // And a fresh backward reproduces the first bit for bit.
  Kokkos::deep_copy(m.grads.slab, 0.0f);
  m.backward();
  EXPECT_EQ(test::to_host(m.grads.slab), once);
}

}  // namespace mpf
