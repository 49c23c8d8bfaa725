// Softmax cross-entropy over the real vocabulary: columns V..Vp-1 of the logits are padding and
// never enter the softmax (llm.c). The forward turns the logits into probabilities in place (as
// llm.c keeps probs), so the backward needs no second pass of exponentials.
#pragma once

#include "core/types.hpp"

namespace mpf {

// losses (N) = logsumexp(logits[n, :V]) − logits[n, target]; then logits (N,Vp) becomes
// softmax(logits[n, :V]) with zeros in the padded columns. targets (N), each < V (checked when
// the data was loaded).
void cross_entropy_forward(Tensor losses, Tensor logits, const Tokens& targets, int64_t N, int V,
                           int Vp);

// dlogits (N,Vp) = (probs − onehot(target)) · dloss, where probs is what the forward left;
// dloss is d(total loss)/d(each token's loss), e.g. 1/(global B·T). dlogits may alias probs.
void cross_entropy_backward_input(Tensor dlogits, Tensor probs, const Tokens& targets, float dloss,
                                  int64_t N, int Vp);

}  // namespace mpf
