// Softmax cross-entropy over the real vocabulary, vocab-parallel (Megatron's
// vocab_parallel_cross_entropy): a rank holds the logits of columns [vocab_begin, vocab_begin +
// Vl) and the logits are never gathered; each row's max, sum of exponentials and target logit are
// combined with two all-reduces over `tp`. Columns >= V are padding and never enter the softmax
// (llm.c). Given the gradient's scale, the forward writes the logits' gradient over them in the
// same pass as the loss (llm.c's fused classifier), so the backward reads no probabilities and
// needs no communication. The logits are fp32, or bf16 (the LM head's under --precision bf16, as
// autocast keeps them), read as fp32 and computed on in fp32, their gradient written in bf16.
#pragma once

#include <mpi.h>

#include "core/bf16.hpp"
#include "core/types.hpp"

namespace mpf {

// losses (N) = logsumexp(logits[n, :V]) − logits[n, target] over all ranks. With dloss (d(total
// loss)/d(each token's loss), e.g. 1/(global B·T)) the local logits (N,Vl) become their gradient
// (softmax − onehot(target)) · dloss, zero in padded columns; with dloss = 0 they are left as they
// are and row_stats (3N: each row's max, Σ exp and target logit) keeps what
// cross_entropy_gradient needs. targets (N), each < V (checked when the data was loaded).
void cross_entropy_forward(Tensor losses, Tensor logits, Tensor row_stats, const Tokens& targets,
                           int64_t N, int V, int vocab_begin, int Vl, MPI_Comm tp,
                           float dloss = 0.0f);
void cross_entropy_forward(Tensor losses, Tensor16 logits, Tensor row_stats, const Tokens& targets,
                           int64_t N, int V, int vocab_begin, int Vl, MPI_Comm tp,
                           float dloss = 0.0f);

// The gradient after a forward without one: logits (N,Vl), left as they were, become
// (softmax − onehot(target)) · dloss from the forward's row_stats (the same bits as the forward
// with dloss would have written).
void cross_entropy_gradient(Tensor logits, Tensor row_stats, const Tokens& targets, float dloss,
                            int64_t N, int V, int vocab_begin, int Vl);
void cross_entropy_gradient(Tensor16 logits, Tensor row_stats, const Tokens& targets, float dloss,
                            int64_t N, int V, int vocab_begin, int Vl);

}  // namespace mpf
