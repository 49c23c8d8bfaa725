// The next token from the vocab-parallel head's logits: a rank holds the logits of its vocabulary
// shard only, and they are never gathered to choose. Every rank of `tp` reaches the same token:
//  - greedy: each rank's best real column, then one all-reduce (MPI_MAXLOC: the highest logit,
//    ties to the lower id);
//  - sampling at temperature τ, llm.c's way (sample_mult): one uniform u from the counter-based
//    RNG at (seed, draw) and the first token, in id order, whose cumulative probability
//    softmax(z/τ) exceeds u. Each rank sums its shard's e^{(z - m)/τ}; one all-gather of those
//    sums (with each shard's max m) tells every rank which shard holds u, that rank walks its
//    shard, and one all-reduce shares the token. A draw is reproducible from the seed and, since
//    the shards are the vocabulary in id order, the same on any TP layout (up to the rounding of
//    the logits and of the sums);
//  - top-k: first the k-th largest logit over all ranks (each rank's k best, all-gathered); the
//    tokens at or above it take part (all of them when several tie at the boundary).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/types.hpp"
#include "model/shard.hpp"

namespace mpf {

struct Sampling {
  float temperature = 0.0f;  // 0: greedy
  int top_k = 0;             // 0: the whole vocabulary
  uint64_t seed = 1337;
};

class TokenSampler {
 public:
  // Allocates the host buffers of a vocabulary shard once (a fresh 200 KB buffer per token costs
  // ~0.3 ms in page faults here, more than the draw).
  TokenSampler(const TpShard& shard, const Sampling& sampling, MPI_Comm tp);

  // The token that follows logits (this rank's Vl columns, from the head). `draw` numbers the
  // draws of a run, so each has its own uniform. Collective over tp. Throws InputError, on every
  // rank alike, if the logits are not finite (a corrupt or diverged model).
  int32_t next(Tensor logits, uint64_t draw);

  // The V real logits, gathered on rank 0 of tp (empty on the others): for inspection.
  std::vector<float> gather(Tensor logits);

 private:
  int32_t greedy(const float* z, int n, const std::string& not_finite);
  // The k-th largest logit over all ranks; -inf when the vocabulary has fewer than k tokens.
  float top_k_threshold(const float* z, int n);

  TpShard shard_;
  Sampling sampling_;
  MPI_Comm tp_;
  int rank_ = 0, ranks_ = 1;
  int real_ = 0;                          // real (non-padding) columns of this shard
  Kokkos::View<float*, HostSpace> host_;  // the shard's logits on the host
  std::vector<float> weights_, scratch_, best_, all_best_;
  std::vector<double> sums_;
};

}  // namespace mpf
