// The next token from the vocab-parallel head's logits: a rank holds the logits of its vocabulary
// shard only, and they are never gathered to choose. Every rank of `tp` reaches the same token:
//  - greedy: each rank's best real column, then one all-reduce (MPI_MAXLOC: the highest logit,
//    ties to the lower id);
//  - sampling at temperature τ by the Gumbel-max trick: token = argmax_j (z_j/τ + g_j) is a draw
//    from softmax(z/τ) when g_j = −log(−log u_j) with u_j uniform. u_j is the counter-based RNG at
//    (seed, draw, j): the noise of token j does not depend on which rank holds it, so a draw is
//    reproducible from the seed and the same on any TP layout (up to the logits' own rounding),
//    and choosing it is the same single all-reduce as greedy;
//  - top-k: first the k-th largest logit over all ranks (each rank's k best, all-gathered); the
//    tokens at or above it take part (all of them when several tie at the boundary).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "core/types.hpp"
#include "model/shard.hpp"

namespace mpf {

struct Sampling {
  float temperature = 0.0f;  // 0: greedy
  int top_k = 0;             // 0: the whole vocabulary
  uint64_t seed = 1337;
};

// The token that follows logits (this rank's Vl columns, from the head). `draw` numbers the draws
// of a run, so each has its own noise. Collective over tp. Throws InputError, on every rank
// alike, if the logits are not finite (a corrupt or diverged model).
int32_t next_token(Tensor logits, const TpShard& shard, const Sampling& sampling, uint64_t draw,
                   MPI_Comm tp);

// The V real logits, gathered on rank 0 of tp (empty on the others): for inspection.
std::vector<float> gather_logits(Tensor logits, const TpShard& shard, MPI_Comm tp);

}  // namespace mpf
