// The routing of a mixture of experts (Shazeer et al. 2017; Mixtral, Jiang et al. 2024): a token's
// router logits become probabilities p = softmax over all E experts, the k highest are its
// experts (ties to the lower index), and their gates are p renormalised over the k (Mixtral,
// Qwen3-MoE's norm_topk_prob) or p itself (OLMoE). Dropless: every token reaches its k experts.
// The tokens' (token, slot) pairs are sorted by expert, then by slot index, so each expert's rows
// are contiguous and in a fixed order: its product and its sums do not depend on the layout.
// The balance loss, per sequence row of T tokens (DeepSeek-V3's sequence-wise form of Switch's):
//   aux_b = coef · E / (k · T²) · Σ_e (Σ_t p_te) · c_e,
// c_e counting the (token, slot) choices of expert e in the row.
#pragma once

#include <cstdint>
#include <vector>

#include "core/bf16.hpp"
#include "core/types.hpp"

namespace mpf {

struct MoeShape {
  int64_t rows = 0;  // R tokens: `seqs` sequence rows of R / seqs tokens each
  int seqs = 1;
  int E = 0, k = 0;
  bool renormalize = true;
  // DeepSeekMoE's routing (model/config.hpp): sigmoid scores, the k chosen on scores + bias[e]
  // (none: the scores) inside the topk_groups of `groups` groups of E / groups experts with the
  // largest sums of their two best, the others' experts counted 0 (as transformers masks them);
  // the gates times `scale`.
  bool sigmoid = false;
  int groups = 1, topk_groups = 1;
  float scale = 1.0f;
  const float* bias = nullptr;
  int64_t slots() const { return rows * k; }
  int64_t seq_rows() const { return rows / seqs; }
};

// In place: probs (R,E) from the router's logits to their softmax (or sigmoid); choice (R·k) each
// token's k experts, most probable first; gates (R·k).
void moe_route(Tensor probs, int32_t* choice, Tensor gates, const MoeShape& s);

// counts (E): slots per expert, returned on the host too; order (R·k): the slots (token·k + j)
// sorted by expert, then by slot; where (R·k): each slot's place in that order.
std::vector<int64_t> moe_sort(int32_t* counts, int32_t* order, int32_t* where,
                              const int32_t* choice, const MoeShape& s);

// stats (2, seqs, E): [c_e | Σ_t p_te] of each sequence row (this rank's tokens of it).
void moe_balance_stats(Tensor stats, Tensor probs, const int32_t* choice, const MoeShape& s);
// *total += Σ_b aux_b, the rows' balance losses from their stats (summed over the sequence's
// ranks), T the whole sequence's tokens.
void moe_balance_loss(double* total, Tensor stats, float coef, int64_t T, const MoeShape& s);

// out (R·k, C): row p is x's row of the token of slot order[p].
void moe_gather(Tensor out, Tensor x, const int32_t* order, int C, const MoeShape& s);
// The same written rounded to bf16 (the experts' inputs kept in bf16, model/activations.hpp).
void moe_gather(Tensor16 out, Tensor x, const int32_t* order, int C, const MoeShape& s);
// out (R,C) += Σ_j gate_j · y[where[token·k + j]] (j in slot order); no gates: weight 1.
void moe_combine(Tensor out, Tensor y, Tensor gates, const int32_t* where, int C,
                 const MoeShape& s);
// The same from outputs kept in bf16 (read widened, summed in fp32).
void moe_combine(Tensor out, Tensor16 y, Tensor gates, const int32_t* where, int C,
                 const MoeShape& s);
// dgates (R·k): dgates[order[p]] = Σ_c dy[p,c] · y[p,c], the gate's gradient from the slot's
// output gradient and its ungated output (this rank's part when y is a partial sum over TP).
void moe_gate_grads(Tensor dgates, Tensor dy, Tensor y, const int32_t* order, int C,
                    const MoeShape& s);
void moe_gate_grads(Tensor dgates, Tensor dy, Tensor16 y, const int32_t* order, int C,
                    const MoeShape& s);
// x (R·k, width) row p scaled by the gate of slot order[p].
void moe_scale_rows(Tensor x, Tensor gates, const int32_t* order, int width, const MoeShape& s);
// dlogits (R,E): the router logits' gradient from the gates' (dgates) and the balance loss's:
// ∂J/∂p_te = aux_scale · c_e of the token's row (stats as moe_balance_stats, summed).
void moe_route_backward(Tensor dlogits, Tensor dgates, Tensor probs, const int32_t* choice,
                        Tensor gates, Tensor stats, float aux_scale, const MoeShape& s);

}  // namespace mpf
