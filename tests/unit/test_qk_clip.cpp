// QK-clip (optim/qk_clip.hpp) on parameters with a planted large head: the head whose largest
// logit passed τ has its Q rows (and K rows, under multi-head attention) scaled so that its
// logit becomes τ; every other parameter, and the other heads, keep their bits; the bf16 copy
// follows the scaled rows.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/bf16.hpp"
#include "core/transfer.hpp"
#include "model/parameters.hpp"
#include "model/shard.hpp"
#include "optim/qk_clip.hpp"
#include "unit/test_helpers.hpp"

namespace mpf {
namespace {

using test::to_host;

// The largest logit of head h over rows x (T, C): max over query t, key u <= t of
// q_t·k_u/√hs, with q = x·W_qᵀ + b_q and k from the head's key head.
double largest_logit(const std::vector<float>& w, const std::vector<float>& bias, bool has_bias,
                     const std::vector<float>& x, int T, int C, int NH, int KVH, int hs, int h) {
  const int kh = h / (NH / KVH);
  auto project = [&](int row0, int t, std::vector<double>& out) {
    out.assign(hs, 0.0);
    for (int d = 0; d < hs; ++d) {
      double acc = has_bias ? bias[size_t(row0 + d)] : 0.0;
      for (int c = 0; c < C; ++c) acc += double(w[size_t(row0 + d) * C + c]) * x[size_t(t) * C + c];
      out[size_t(d)] = acc;
    }
  };
  double best = -INFINITY;
  std::vector<double> q, k;
  for (int t = 0; t < T; ++t) {
    project(h * hs, t, q);
    for (int u = 0; u <= t; ++u) {
      project((NH + kh) * hs, u, k);
      double dot = 0.0;
      for (int d = 0; d < hs; ++d) dot += q[size_t(d)] * k[size_t(d)];
      best = std::max(best, dot / std::sqrt(double(hs)));
    }
  }
  return best;
}

void expect_clip(GPTConfig cfg, const char* what) {
  SCOPED_TRACE(what);
  const TpShard shard = make_tp_shard(cfg, 0, 1);
  Parameters params = Parameters::allocate(shard, "test::params");
  initialize(params, shard, 7);
  const int NH = shard.heads, KVH = shard.kv_heads, hs = shard.head_size, C = cfg.channels;
  const int T = 6;
  const std::vector<float> x = to_host(test::random_slab("test::x", int64_t(T) * C, 1.0f));
  // Plant: block 1's head 2 queries (and, MHA, its keys) 30 times larger.
  LayerParameters& p = params.t.blocks[1];
  std::vector<float> w = to_host(p.qkvw);
  for (int64_t i = int64_t(2) * hs * C; i < int64_t(3) * hs * C; ++i) w[size_t(i)] *= 30.0f;
  copy_from_host(p.qkvw.data(), w.data(), w.size() * sizeof(float), "test");
  const bool has_bias = p.qkvb.data() != nullptr;
  const std::vector<float> bias = has_bias ? to_host(p.qkvb) : std::vector<float>{};
  std::vector<float> head_max(2 * size_t(NH));
  for (int b = 0; b < 2; ++b) {
    const std::vector<float> wb = to_host(params.t.blocks[size_t(b)].qkvw);
    const std::vector<float> bb = has_bias ? to_host(params.t.blocks[size_t(b)].qkvb) : bias;
    for (int h = 0; h < NH; ++h)
      head_max[size_t(b * NH + h)] =
          float(largest_logit(wb, bb, has_bias, x, T, C, NH, KVH, hs, h));
  }
  const float planted = head_max[size_t(NH + 2)];
  float others = -INFINITY;
  for (size_t i = 0; i < head_max.size(); ++i)
    if (i != size_t(NH + 2)) others = std::max(others, head_max[i]);
  const float tau = 0.5f * (planted + others);  // above every head but the planted one
  ASSERT_GT(planted, others);
  Bf16Slab w16("test::w16", params.count);
  round_to_bf16(w16.data(), params.slab.data(), params.count);
  const std::vector<float> before = to_host(params.slab);

  const QkClipReport r = qk_clip(params, shard, head_max, tau, w16.data());
  EXPECT_EQ(r.heads, 1);
  EXPECT_EQ(r.largest, planted);
  const std::vector<float> after = to_host(params.slab);
  // The planted head's logit is now τ (to the rounding of the scaled weights).
  const std::vector<float> wa = to_host(p.qkvw), ba = has_bias ? to_host(p.qkvb) : bias;
  EXPECT_NEAR(largest_logit(wa, ba, has_bias, x, T, C, NH, KVH, hs, 2), tau, 1e-4 * tau);
  // Which elements changed: that head's Q rows (and bias), and its K rows under multi-head
  // attention; nothing else, bit for bit.
  const int64_t qkvw0 = p.qkvw.data() - params.slab.data();
  const int64_t qkvb0 = has_bias ? p.qkvb.data() - params.slab.data() : -1;
  auto scaled = [&](int64_t i) {
    auto in_rows = [&](int64_t base, int64_t row, int64_t width) {
      return base >= 0 && i >= base + row * width && i < base + (row + hs) * width;
    };
    const bool mha = KVH == NH;
    return in_rows(qkvw0, 2 * hs, C) || in_rows(qkvb0, 2 * hs, 1) ||
           (mha && (in_rows(qkvw0, (NH + 2) * hs, C) || in_rows(qkvb0, (NH + 2) * hs, 1)));
  };
  std::vector<bf16> got16(size_t(params.count));
  copy_to_host(got16.data(), w16.data(), got16.size() * sizeof(bf16), "test");
  int64_t changed = 0;
  for (int64_t i = 0; i < params.count; ++i) {
    if (scaled(i)) {
      ++changed;
      if (before[size_t(i)] != 0.0f) {
        EXPECT_NE(after[size_t(i)], before[size_t(i)]) << i;
      }
      EXPECT_EQ(got16[size_t(i)], to_bf16(after[size_t(i)])) << "bf16 copy " << i;
    } else {
      ASSERT_EQ(after[size_t(i)], before[size_t(i)]) << "element " << i << " changed";
    }
  }
  EXPECT_GT(changed, 0);
}

TEST(QkClip, MultiHeadScalesTheHeadsQueriesAndKeys) {
  expect_clip(GPTConfig{16, 64, 64, 2, 4, 32}, "GPT-2, 4 heads");
}

TEST(QkClip, GroupedQueryScalesTheQueryHeadAlone) {
  GPTConfig cfg{16, 64, 64, 2, 4, 32};
  cfg.arch = Arch::kLlama;
  cfg.kv_heads = 2;
  cfg.ffn_dim = 48;
  expect_clip(cfg, "Llama, 4 heads over 2 kv heads");
}

}  // namespace
}  // namespace mpf
