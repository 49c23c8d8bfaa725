// Softmax cross-entropy over the real vocabulary: columns V..Vp-1 of the logits are padding and
// never enter the softmax (llm.c).
#pragma once

#include "core/types.hpp"

namespace mpf {

// losses (N) = logsumexp(logits[n, :V]) − logits[n, target]; lse (N) saved for backward.
// logits (N,Vp); targets (N), each < V (checked when the data was loaded).
void cross_entropy_forward(Tensor losses, Tensor lse, Tensor logits, const Tokens& targets,
                           int64_t N, int V, int Vp);

// dlogits (N,Vp) = (softmax(logits) − onehot(target)) · dloss over columns < V, 0 beyond;
// dloss is d(total loss)/d(each token's loss), e.g. 1/(global B·T). dlogits may alias logits.
void cross_entropy_backward_input(Tensor dlogits, Tensor logits, Tensor lse, const Tokens& targets,
                                  float dloss, int64_t N, int V, int Vp);

}  // namespace mpf
