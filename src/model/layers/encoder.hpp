// Token + position embedding, vocab-parallel (Megatron's VocabParallelEmbedding): a rank holds
// rows [vocab_begin, vocab_begin + vocab_shard) of wte and contributes zero for tokens outside
// them; the caller sums the ranks' outputs (g's all-reduce). Only the rank with add_positions
// adds wpe, so the sum holds it once. With one rank this is the plain embedding.
// Its only backward is the weight gradient: tokens have no gradient.
#pragma once

#include "core/types.hpp"
#include "model/positions.hpp"

namespace mpf {

// out (B,T,C) = [tokens in shard] wte[tokens[b,t] − vocab_begin] + [add_positions] wpe[p(t)];
// tokens (B,T), wte (Vl,C), wpe (maxT,C); p(t) = positions.position(t), t itself by default (a
// context-parallel rank's rows are chunks of the sequence: model/positions.hpp).
void encoder_forward(Tensor out, const Tokens& tokens, Tensor wte, Tensor wpe, int B, int T, int C,
                     int vocab_begin, int vocab_shard, bool add_positions,
                     const PositionRuns& positions = PositionRuns::contiguous(0));

// dwte[tokens[b,t] − vocab_begin] += dout[b,t] for tokens in the shard; dwpe[p(t)] += Σ_b
// dout[b,t] (wpe is replicated: every rank takes its full gradient; an empty dwpe: no position
// table); dout (B,T,C)
void encoder_backward_weight(Tensor dwte, Tensor dwpe, Tensor dout, const Tokens& tokens, int B,
                             int T, int C, int vocab_begin, int vocab_shard,
                             const PositionRuns& positions = PositionRuns::contiguous(0));

}  // namespace mpf
