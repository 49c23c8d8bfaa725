#include "generate/sampler.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <functional>

#include "core/error.hpp"
#include "core/rng.hpp"

namespace mpf {

namespace {

// The logits of this rank's real (non-padding) vocabulary columns, on the host.
std::vector<float> real_logits(Tensor logits, const TpShard& s) {
  const int real = std::clamp(s.cfg.vocab - s.vocab_begin, 0, s.vocab_shard);
  auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), logits);
  return std::vector<float>(host.data(), host.data() + real);
}

// The k-th largest logit over all ranks; -inf when the vocabulary has fewer than k tokens.
double top_k_threshold(std::vector<float> z, int k, MPI_Comm tp) {
  int ranks = 1;
  MPI_Comm_size(tp, &ranks);
  // This rank's k best, padded with -inf; then everyone's.
  const int mine = std::min<int>(k, int(z.size()));
  std::nth_element(z.begin(), z.begin() + mine, z.end(), std::greater<float>());
  std::vector<float> best(k, -INFINITY), all(size_t(k) * ranks);
  std::copy(z.begin(), z.begin() + mine, best.begin());
  MPF_MPI_CHECK(MPI_Allgather(best.data(), k, MPI_FLOAT, all.data(), k, MPI_FLOAT, tp));
  std::nth_element(all.begin(), all.begin() + (k - 1), all.end(), std::greater<float>());
  return all[k - 1];
}

}  // namespace

int32_t next_token(Tensor logits, const TpShard& shard, const Sampling& sampling, uint64_t draw,
                   MPI_Comm tp) {
  const std::vector<float> z = real_logits(logits, shard);
  const bool greedy = sampling.temperature <= 0.0f || sampling.top_k == 1;
  const double threshold =
      !greedy && sampling.top_k > 0 ? top_k_threshold(z, sampling.top_k, tp) : -INFINITY;
  // This rank's best candidate by score, then the best over the ranks.
  struct {
    double score;
    int id;
  } best{-INFINITY, INT_MAX}, global;
  const double inv_t = greedy ? 1.0 : 1.0 / sampling.temperature;
  for (size_t j = 0; j < z.size(); ++j) {
    if (!(z[j] >= threshold)) continue;  // outside the top k (or NaN)
    const int id = shard.vocab_begin + int(j);
    double score = z[j] * inv_t;
    if (!greedy) score -= std::log(-std::log(rng::uniform(sampling.seed, draw, uint64_t(id))));
    if (score > best.score) best = {score, id};
  }
  MPF_MPI_CHECK(MPI_Allreduce(&best, &global, 1, MPI_DOUBLE_INT, MPI_MAXLOC, tp));
  require(std::isfinite(global.score), "the model's logits are not finite (NaN or Inf) at draw " +
                                           std::to_string(draw) +
                                           "; the checkpoint is corrupt or its training diverged");
  return global.id;
}

std::vector<float> gather_logits(Tensor logits, const TpShard& shard, MPI_Comm tp) {
  int rank = 0;
  MPI_Comm_rank(tp, &rank);
  auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), logits);
  std::vector<float> all(rank == 0 ? size_t(shard.vocab_padded) : 0);
  MPF_MPI_CHECK(MPI_Gather(host.data(), shard.vocab_shard, MPI_FLOAT, all.data(), shard.vocab_shard,
                           MPI_FLOAT, 0, tp));
  if (rank == 0) all.resize(shard.cfg.vocab);  // shard r starts at r·Vl: the real ones come first
  return all;
}

}  // namespace mpf
