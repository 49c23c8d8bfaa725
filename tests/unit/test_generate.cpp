// The generator's pieces, on a TP group of every rank: attention over the KV cache equals the
// training attention row by row; the cached decoder equals recomputing the whole prefix through
// the training forward (with latent attention's cache too), and a TP decoder equals the serial one;
// the sampler picks the argmax, draws from softmax(z/τ) at the right frequencies, keeps to the top
// k, and reaches the same token on a vocabulary split over the ranks as on one rank.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpointing.hpp"
#include "generate/decoder.hpp"
#include "generate/kv_cache.hpp"
#include "generate/sampler.hpp"
#include "model/layers/attention.hpp"
#include "model/shard.hpp"
#include "test_helpers.hpp"

namespace mpf {

using test::random_slab;
using test::rank_of;
using test::size_of;
using test::to_host;
using test::view;

namespace {

GPTConfig tiny_config(int vocab = 300) {
  // V = 300 pads to 384 (512 over 2 ranks): the vocabulary's real columns straddle the shards.
  return GPTConfig{32, vocab, pad_vocab(vocab), 2, 4, 32};
}

// The largest |a - b| over the largest |b|; the largest |a - b| itself where b is all zeros (the
// logits of a vocabulary shard of padding only, rank 3 of 4).
double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(double(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return scale > 0.0 ? diff / scale : diff;
}

std::vector<float> host_of(Tensor t) {
  auto h = Kokkos::create_mirror_view_and_copy(HostSpace(), t);
  return std::vector<float>(h.data(), h.data() + h.extent(0));
}

// A rank's vocabulary shard of full logits (V real columns; padding columns zero).
Slab shard_of(const std::vector<float>& full, const TpShard& s) {
  Slab out("test::logits", s.vocab_shard);
  auto h = Kokkos::create_mirror_view(out);
  for (int j = 0; j < s.vocab_shard; ++j) {
    const int id = s.vocab_begin + j;
    h(j) = id < s.cfg.vocab ? full[id] : 0.0f;
  }
  Kokkos::deep_copy(out, h);
  return out;
}

// One draw through a fresh sampler.
int32_t next_token(Tensor logits, const TpShard& shard, const Sampling& sampling, uint64_t draw,
                   MPI_Comm tp) {
  return TokenSampler(shard, sampling, tp).next(logits, draw);
}

}  // namespace

// Positions fed in chunks of 5, 1, 3 and 3 attend over the cache as the training attention's
// causal rows do over the whole sequence (the same kernel, its tiles cut elsewhere).
TEST(KVCache, CachedAttentionEqualsTrainingAttention) {
  const GPTConfig cfg{16, 256, 256, 1, 2, 16};
  const TpShard shard = make_tp_shard(cfg, 0, 1);
  const int T = 12, Ca = 16, NH = 2;
  const Slab qkv = random_slab("test::qkv", T * 3 * Ca);
  Slab reference("test::reference", T * Ca), lse("test::lse", NH * T);
  attention_forward(view(reference), view(lse), view(qkv), 1, T, NH, NH, Ca / NH);

  const KVCache cache = KVCache::allocate(shard, T);
  Slab out("test::out", T * Ca), scores("test::scores", NH * T);
  int pos = 0;
  for (const int n : {5, 1, 3, 3}) {
    const Tensor rows(qkv.data() + pos * 3 * Ca, n * 3 * Ca);
    kv_cache_store(cache, 0, rows, n, pos);
    cached_attention_forward(Tensor(out.data() + pos * Ca, n * Ca), view(scores), rows, cache, 0, n,
                             pos, NH, 0);
    pos += n;
  }
  EXPECT_LT(relative_difference(to_host(out), to_host(reference)), 1e-6);
}

// A prompt in one pass, then one token at a time: the same logits as running the training
// forward over the whole prefix at every step (on a TP group: the world's ranks).
TEST(Decoder, CacheEqualsRecomputingThePrefix) {
  const MPI_Comm tp = MPI_COMM_WORLD;
  const GPTConfig cfg = tiny_config();
  const TpShard shard = make_tp_shard(cfg, rank_of(tp), size_of(tp));
  Parameters params = Parameters::allocate(shard, "test::params");
  initialize(params, shard, 42);
  Decoder cached(shard, params.t, 20, ModelGroups{tp}),
      recomputed(shard, params.t, 20, ModelGroups{tp}, false);
  const std::vector<std::vector<int32_t>> feeds = {{5, 299, 17, 256, 0, 42, 128}, {7}, {255}, {1}};
  for (const auto& tokens : feeds) {
    const std::vector<float> a = host_of(cached.append(tokens));
    const std::vector<float> b = host_of(recomputed.append(tokens));
    EXPECT_LT(relative_difference(a, b), 1e-5) << "after position " << cached.length();
  }
  EXPECT_EQ(cached.length(), 10);
  cached.reset();
  EXPECT_EQ(cached.length(), 0);
}

// DeepSeek-V3's latent attention: the cache holds kv_lora_rank + qk_rope values a token a layer
// (the whole latent on every TP rank) and its absorbed attention gives the logits of recomputing
// the whole prefix through the per-head training forward, a prompt, single tokens and two at once.
TEST(Decoder, LatentCacheEqualsRecomputingThePrefix) {
  const MPI_Comm tp = MPI_COMM_WORLD;
  GPTConfig cfg = tiny_config();
  cfg.arch = Arch::kDeepseekV3;
  cfg.tied = false;
  cfg.ffn_dim = 48;
  cfg.norm_eps = 1e-6f;
  cfg.rope_theta = 10000.0f;
  cfg.q_lora_rank = 8;
  cfg.kv_lora_rank = 12;
  cfg.qk_nope_dim = 8;
  cfg.qk_rope_dim = 4;
  cfg.v_head_dim = 6;
  cfg.rope_yarn = true;
  cfg.rope_factor = 4.0f;
  cfg.rope_original_max_pos = 8;
  cfg.yarn_mscale = 1.0f;
  cfg.yarn_mscale_all_dim = 0.8f;
  const TpShard shard = make_tp_shard(cfg, rank_of(tp), size_of(tp));
  Parameters params = Parameters::allocate(shard, "test::params");
  initialize(params, shard, 42);
  Decoder cached(shard, params.t, 20, ModelGroups{tp}),
      recomputed(shard, params.t, 20, ModelGroups{tp}, false);
  EXPECT_TRUE(cached.cache().latent);
  EXPECT_EQ(cached.cache().floats_per_token_layer(), 12 + 4);
  const std::vector<std::vector<int32_t>> feeds = {
      {5, 299, 17, 256, 0, 42, 128}, {7}, {255, 3}, {1}};
  for (const auto& tokens : feeds) {
    const std::vector<float> a = host_of(cached.append(tokens));
    const std::vector<float> b = host_of(recomputed.append(tokens));
    EXPECT_LT(relative_difference(a, b), 1e-5) << "after position " << cached.length();
  }
}

// Tensor parallel: the vocab-parallel logits, gathered, are the serial model's.
TEST(Decoder, TensorParallelEqualsSerial) {
  const MPI_Comm tp = MPI_COMM_WORLD;
  const GPTConfig cfg = tiny_config();
  const TpShard shard = make_tp_shard(cfg, rank_of(tp), size_of(tp));
  const TpShard whole = make_tp_shard(cfg, 0, 1);
  Parameters params = Parameters::allocate(shard, "test::params");
  Parameters serial = Parameters::allocate(whole, "test::serial");
  initialize(params, shard, 42);
  initialize(serial, whole, 42);
  Decoder parallel(shard, params.t, 16, ModelGroups{tp}), alone(whole, serial.t, 16, ModelGroups{});
  TokenSampler on_tp(shard, Sampling{}, tp), on_self(whole, Sampling{}, MPI_COMM_SELF);
  for (const auto& tokens : std::vector<std::vector<int32_t>>{{3, 1, 4, 1, 5}, {9}, {290}}) {
    const std::vector<float> mine = on_tp.gather(parallel.append(tokens));
    const std::vector<float> reference = on_self.gather(alone.append(tokens));
    if (rank_of(tp) == 0) {
      EXPECT_LT(relative_difference(mine, reference), 1e-5);
    }
  }
}

// Greedy is the argmax over the real vocabulary (ties to the lower id); top-k 1 is greedy; NaN
// logits are an error, not a token.
TEST(Sampler, GreedyIsTheArgmax) {
  const GPTConfig cfg = tiny_config();
  const TpShard whole = make_tp_shard(cfg, 0, 1);
  std::vector<float> z(cfg.vocab, 0.0f);
  z[123] = 2.0f;
  z[222] = 2.0f;
  const Slab logits = shard_of(z, whole);
  EXPECT_EQ(next_token(view(logits), whole, Sampling{}, 0, MPI_COMM_SELF), 123);
  EXPECT_EQ(next_token(view(logits), whole, Sampling{1.0f, 1, 7}, 0, MPI_COMM_SELF), 123);
  const Slab bad = shard_of(std::vector<float>(cfg.vocab, NAN), whole);
  EXPECT_NE(test::input_error([&] {
              next_token(view(bad), whole, Sampling{}, 0, MPI_COMM_SELF);
            }).find("not finite"),
            std::string::npos);
}

// Sampling at temperature τ draws token j with probability softmax(z/τ)_j: over 40000 draws each
// frequency is within 5 standard deviations of it; top-k never leaves the k most likely; a draw
// is a function of (seed, draw index).
TEST(Sampler, DrawsFromTheSoftmax) {
  const GPTConfig cfg{32, 6, 128, 1, 1, 8};
  const TpShard whole = make_tp_shard(cfg, 0, 1);
  const std::vector<float> z = {1.0f, 0.0f, 2.5f, -1.0f, 2.0f, 0.5f};
  const Slab logits = shard_of(z, whole);
  const float tau = 1.5f;
  const int draws = 40000;
  std::vector<int> counts(6, 0), top2(6, 0);
  for (int d = 0; d < draws; ++d) {
    ++counts[next_token(view(logits), whole, Sampling{tau, 0, 11}, d, MPI_COMM_SELF)];
    ++top2[next_token(view(logits), whole, Sampling{tau, 2, 11}, d, MPI_COMM_SELF)];
  }
  double sum = 0.0;
  for (float v : z) sum += std::exp(v / tau);
  for (int j = 0; j < 6; ++j) {
    const double p = std::exp(z[j] / tau) / sum;
    EXPECT_NEAR(counts[j], draws * p, 5 * std::sqrt(draws * p * (1 - p)) + 1) << "token " << j;
  }
  // Top 2: tokens 2 and 4, in the ratio of their probabilities.
  EXPECT_EQ(top2[2] + top2[4], draws);
  const double p2 = 1.0 / (1.0 + std::exp((z[4] - z[2]) / tau));
  EXPECT_NEAR(top2[2], draws * p2, 5 * std::sqrt(draws * p2 * (1 - p2)));
  const Sampling s{tau, 0, 11};
  std::vector<int32_t> a, b, c;
  for (int d = 0; d < 50; ++d) {
    a.push_back(next_token(view(logits), whole, s, d, MPI_COMM_SELF));
    b.push_back(next_token(view(logits), whole, s, d, MPI_COMM_SELF));
    c.push_back(next_token(view(logits), whole, Sampling{tau, 0, 12}, d, MPI_COMM_SELF));
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

// The vocabulary split over the world's ranks (rank 1 of 2 holds ids 256..299 and padding; rank 3
// of 4 padding only): every rank reaches the token one rank reaches with the whole vocabulary,
// draw after draw.
TEST(Sampler, SameTokenOnAnyVocabularySplit) {
  const MPI_Comm tp = MPI_COMM_WORLD;
  const GPTConfig cfg = tiny_config();
  const TpShard shard = make_tp_shard(cfg, rank_of(tp), size_of(tp));
  const TpShard whole = make_tp_shard(cfg, 0, 1);
  const Slab full = random_slab("test::full_logits", cfg.vocab, 2.0f);
  const std::vector<float> z = to_host(full);
  const Slab mine = shard_of(z, shard), all = shard_of(z, whole);
  for (const Sampling s : {Sampling{}, Sampling{1.0f, 0, 3}, Sampling{0.7f, 20, 3}}) {
    for (int d = 0; d < 64; ++d) {
      const int32_t split = next_token(view(mine), shard, s, d, tp);
      EXPECT_EQ(split, next_token(view(all), whole, s, d, MPI_COMM_SELF))
          << "draw " << d << " temperature " << s.temperature << " top-k " << s.top_k;
    }
  }
}

}  // namespace mpf
