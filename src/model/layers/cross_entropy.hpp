// Softmax cross-entropy over the real vocabulary, vocab-parallel (Megatron's
// vocab_parallel_cross_entropy): a rank holds the logits of columns [vocab_begin, vocab_begin +
// Vl) and the logits are never gathered; each row's max, sum of exponentials and target logit are
// combined with two all-reduces over `tp`. Columns >= V are padding and never enter the softmax
// (llm.c). The forward turns the logits into probabilities in place (as llm.c keeps probs), so the
// backward needs no communication and no second pass of exponentials.
#pragma once

#include <mpi.h>

#include "core/types.hpp"

namespace mpf {

// losses (N) = logsumexp(logits[n, :V]) − logits[n, target] over all ranks; then the local logits
// (N,Vl) become the probabilities of their columns, zero in padded ones. row_stats (3N) is scratch.
// targets (N), each < V (checked when the data was loaded).
void cross_entropy_forward(Tensor losses, Tensor logits, Tensor row_stats, const Tokens& targets,
                           int64_t N, int V, int vocab_begin, int Vl, MPI_Comm tp);

// dlogits (N,Vl) = (probs − onehot(target)) · dloss on this rank's columns; dloss is d(total
// loss)/d(each token's loss), e.g. 1/(global B·T). dlogits may alias probs.
void cross_entropy_backward_input(Tensor dlogits, Tensor probs, const Tokens& targets, float dloss,
                                  int64_t N, int vocab_begin, int Vl);

}  // namespace mpf
