#include "generate/sampler.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <functional>
#include <string>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "core/transfer.hpp"
#include "core/vector_math.hpp"

namespace mpf {

TokenSampler::TokenSampler(const TpShard& shard, const Sampling& sampling, MPI_Comm tp)
    : shard_(shard), sampling_(sampling), tp_(tp) {
  MPI_Comm_rank(tp, &rank_);
  MPI_Comm_size(tp, &ranks_);
  real_ = std::clamp(shard.cfg.vocab - shard.vocab_begin, 0, shard.vocab_shard);
  host_ = Kokkos::View<float*, HostSpace>("mpf::sampler_logits", shard.vocab_shard);
  weights_.resize(real_);
  scratch_.resize(real_);
  const size_t k = size_t(std::max(sampling.top_k, 0));
  best_.resize(k);
  all_best_.resize(k * ranks_);
  sums_.resize(2 * size_t(ranks_));
}

float TokenSampler::top_k_threshold(const float* z, int n) {
  const int k = sampling_.top_k, mine = std::min(k, n);
  // This rank's k best, padded with -inf; then everyone's.
  std::copy(z, z + n, scratch_.begin());
  std::nth_element(scratch_.begin(), scratch_.begin() + mine, scratch_.begin() + n,
                   std::greater<float>());
  std::fill(best_.begin(), best_.end(), -INFINITY);
  std::copy(scratch_.begin(), scratch_.begin() + mine, best_.begin());
  MPF_MPI_CHECK(MPI_Allgather(best_.data(), k, MPI_FLOAT, all_best_.data(), k, MPI_FLOAT, tp_));
  std::nth_element(all_best_.begin(), all_best_.begin() + (k - 1), all_best_.end(),
                   std::greater<float>());
  return all_best_[k - 1];
}

int32_t TokenSampler::greedy(const float* z, int n, const std::string& not_finite) {
  // This rank's best real column (the first of equals), then the best over the ranks.
  struct {
    float value;
    int id;
  } best{-INFINITY, INT_MAX}, global;
  for (int j = 0; j < n; ++j) {
    if (z[j] > best.value) best = {z[j], shard_.vocab_begin + j};
  }
  MPF_MPI_CHECK(MPI_Allreduce(&best, &global, 1, MPI_FLOAT_INT, MPI_MAXLOC, tp_));
  require(std::isfinite(global.value), not_finite);
  return global.id;
}

int32_t TokenSampler::next(Tensor logits, uint64_t draw) {
  copy_to_host(host_.data(), logits.data(), host_.extent(0) * sizeof(float),
               "d2h logits (sampling)");
  const float* z = host_.data();
  const int n = real_;
  const std::string not_finite = "the model's logits are not finite (NaN or Inf) at draw " +
                                 std::to_string(draw) +
                                 "; the checkpoint is corrupt or its training diverged";
  if (sampling_.temperature <= 0.0f || sampling_.top_k == 1) return greedy(z, n, not_finite);
  const float inv_t = 1.0f / sampling_.temperature;
  const float threshold = sampling_.top_k > 0 ? top_k_threshold(z, n) : -INFINITY;
  // This shard's candidates: their largest logit m and their weights e^{(z - m)/τ} (0 for the
  // others), summed.
  float m = -INFINITY;
  for (int j = 0; j < n; ++j) m = z[j] >= threshold && z[j] > m ? z[j] : m;
  float* w = weights_.data();
  double sum = 0.0;
  if (std::isfinite(m)) {
    for (int j = 0; j < n; ++j) {  // branch-free, so it vectorizes
      const float e = vmath::exp((z[j] - m) * inv_t);
      w[j] = z[j] >= threshold ? e : 0.0f;
    }
    sum = vmath::row_sum(w, n);
  }
  // Every shard's (m, sum): the normaliser over all shards, and where each shard's probability
  // mass starts on the vocabulary's cumulative distribution.
  const double mine[2] = {m, sum};
  MPF_MPI_CHECK(MPI_Allgather(mine, 2, MPI_DOUBLE, sums_.data(), 2, MPI_DOUBLE, tp_));
  double top = -INFINITY;
  for (int r = 0; r < ranks_; ++r) top = std::max(top, sums_[2 * r]);
  require(std::isfinite(top), not_finite);
  auto mass = [&](int r) {  // shard r's Σ e^{(z - top)/τ}
    return sums_[2 * r + 1] > 0 ? sums_[2 * r + 1] * std::exp((sums_[2 * r] - top) * inv_t) : 0.0;
  };
  double total = 0.0;
  for (int r = 0; r < ranks_; ++r) total += mass(r);
  require(std::isfinite(total), not_finite);
  // llm.c's sample_mult: the first token whose cumulative probability exceeds one uniform draw.
  double target = rng::uniform(sampling_.seed, draw, 0) * total;
  int owner = 0;
  while (owner < ranks_ - 1 && (target >= mass(owner) || mass(owner) == 0)) {
    target -= mass(owner++);
  }
  int32_t id = INT_MAX;
  if (rank_ == owner) {
    const double scale = std::exp((m - top) * inv_t);
    double acc = 0.0;
    for (int j = 0; j < n; ++j) {
      if (w[j] == 0.0f) continue;
      id = shard_.vocab_begin + j;  // the last candidate, should rounding leave target above
      acc += w[j] * scale;
      if (acc > target) break;
    }
  }
  int32_t global = INT_MAX;
  MPF_MPI_CHECK(MPI_Allreduce(&id, &global, 1, MPI_INT32_T, MPI_MIN, tp_));
  return global;
}

std::vector<float> TokenSampler::gather(Tensor logits) {
  copy_to_host(host_.data(), logits.data(), host_.extent(0) * sizeof(float),
               "d2h logits (sampling)");
  std::vector<float> all(rank_ == 0 ? size_t(shard_.vocab_padded) : 0);
  MPF_MPI_CHECK(MPI_Gather(host_.data(), shard_.vocab_shard, MPI_FLOAT, all.data(),
                           shard_.vocab_shard, MPI_FLOAT, 0, tp_));
  if (rank_ == 0) all.resize(shard_.cfg.vocab);  // shard r starts at r·Vl: the real ones first
  return all;
}

}  // namespace mpf
