// A block's mixture-of-experts MLP (model/layers/moe.hpp routes) in place of the dense one, inside
// the same tensor-parallel region: the router runs on every row on every TP rank (its weights are
// replicated), each expert's SwiGLU MLP is split over TP as the dense MLP is, and the gated
// outputs join the residual when the region is left. Every expert's rows go through one product
// each, in the routing's fixed order.
#pragma once

#include <mpi.h>

#include "model/activations.hpp"
#include "model/parameters.hpp"
#include "model/shard.hpp"
#include "parallel/tp_regions.hpp"

namespace mpf {

// out (Rl,C) = residual + the gated experts' outputs of a.ln2's rows (all R, gathered), summed
// over TP (under SP into this rank's rows through `partial` (R,C)). Adds the balance loss to
// a.moe.aux when set.
void moe_mlp_forward(const LayerActivations& a, Tensor out, Tensor partial, Tensor residual,
                     const LayerParameters& p, const TpShard& s, const tp::SequenceSplit& seq,
                     MPI_Comm tp);

// From dout (Rl,C), the block output's gradient, to `dln2` (R,C): this rank's partial gradient of
// the MLP's input (the router's counted on TP rank 0 only), before entering the region backwards.
// Leaves in w what the weights' gradients read, and the gathered dout in buf.moe_dout.
void moe_mlp_backward_input(BackwardBuffers& buf, const BlockWeightInputs& w, Tensor dln2,
                            Tensor dout, const LayerActivations& a, const LayerParameters& p,
                            const TpShard& s, const tp::SequenceSplit& seq, MPI_Comm tp);

// The experts' and the router's weight gradients (added).
void moe_mlp_backward_weight(const LayerParameters& g, const BlockWeightInputs& w,
                             const LayerActivations& a, const TpShard& s,
                             const tp::SequenceSplit& seq);

}  // namespace mpf
