// DeepSeek-V3's multi-token prediction (arXiv 2412.19437 §2.2; GPTConfig::mtp = D modules): module
// k = 1..D takes h'_k = eh_proj([enorm(emb(t_{i+k})) ; hnorm(h_{k-1,i})]) through one more block
// (the last block's kind: DeepSeekMoE in DeepSeek-V3), whose output h_k gives depth k's logits
// shared_head.norm(h_k) times the shared LM head; h_0 is the trunk's last block output (before
// the final norm). Row i of depth k predicts t_{i+k+1}: its loss is the mean cross-entropy over the
// B x (T - k) rows that have that token inside the sequence, and the MTP loss λ/D · Σ_k of them.
//
// The modules run over all T rows of each sequence, the tokens shifted by k (token 0 past the
// end): causal attention keeps the valid rows from reading the last k, whose dlogits are zeroed,
// so their losses and gradients are those of the report's T - k rows (the rows past the end
// still route through the block's experts, but its expert loads, which the bias update reads,
// count the valid rows only). The modules are the stage's
// last D local blocks (present_in_block: their rows enorm, hnorm, eh_proj, shared_head.norm),
// so the slab, the optimizer, ZeRO-1, the DP buckets and the checkpoints hold them as blocks.
//
// Each depth has its own set of activations (a chunk of one block with the head), kept for one
// microbatch: the backward runs the forward again first (as full recomputation does: the same
// values), so any schedule may hold several microbatches between their F and B; when the sets
// still hold the microbatch's own forward (its F the last one), that is not done again.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "model/activations.hpp"
#include "model/parameters.hpp"

namespace mpf {

class MtpModules {
 public:
  using Allocate = std::function<std::unique_ptr<Activations>(const ChunkPieces&)>;
  // shard: the stage holding the head and the modules' blocks; weight: λ (--mtp-weight); cp:
  // the ranks holding the rest of each sequence, `positions` where this rank's T rows sit in it.
  MtpModules(const TpShard& shard, int B, int T, float weight, MPI_Comm cp,
             const PositionRuns& positions, const Allocate& allocate);

  // The depths' forward from the trunk's set `trunk` (its output h_0) for one microbatch: adds
  // λ/D · Σ_k T/(T−k) · (depth k's losses over its valid rows) to *mtp_sum (in the kernels'
  // memory; divided by the batch's B·T it is the MTP loss). aux, load: where the modules' blocks
  // add their balance losses and expert loads (null: not, as in the recomputation).
  void forward(const Activations& trunk, const ParameterTensors& params, const Tokens& inputs,
               const Tokens& targets, MPI_Comm tp, double* mtp_sum, double* aux, float* load);
  // The forward again (unless the depths' sets still hold this microbatch's: no other
  // microbatch's forward since, and no ZeRO-2/3 gate to hear it), then each depth's backward,
  // last first, B and W at once: the modules'
  // gradients and their shares of the shared embedding's and head's into `grads`, and the
  // gradient of h_0 into trunk.extra_output_grad (which the trunk's backward adds to its head's).
  // dloss: the step's d(objective)/d(a next-token loss); final: the step's last accumulation.
  void backward(Activations& trunk, const ParameterTensors& params, ParameterTensors& grads,
                BackwardBuffers& buf, const Tokens& inputs, const Tokens& targets, float dloss,
                MPI_Comm tp, bool final);
  // The bytes the modules of `shard` (with the head; 0 without modules) allocate: each depth's
  // set of activations and its buffers, and one depth's W inputs and backward scratch.
  static int64_t bytes(const TpShard& shard, int B, int T, bool sequence_parallel, bool bf16);
  // The modules' blocks' local indices (for the DP buckets' part_done).
  int first_block() const { return first_; }
  int depth() const { return D_; }

 private:
  struct Depth {
    std::unique_ptr<Activations> acts;
    Tokens tokens, targets;  // (B,T) t_{i+k} and t_{i+k+1}, 0 past the end
    Slab emb, cat, rstd_e, rstd_h;
  };
  void forward_depth(int k, const Tensor& h_prev, const ParameterTensors& params, MPI_Comm tp);
  // Depth k's tokens and targets of this rank's rows from every CP rank's targets.
  void shift_across_chunks(Depth& d, const Tokens& targets, int k);

  TpShard shard_;
  int B_, T_, D_, first_;
  // The trunk's set whose microbatch the depths' sets hold the forward of (null: none or spent).
  const Activations* held_ = nullptr;
  float weight_;
  MPI_Comm cp_;
  PositionRuns at_;                 // this rank's rows' positions
  std::vector<PositionRuns> runs_;  // every CP rank's (empty without CP)
  int total_ = 0;                   // a whole sequence's tokens
  std::vector<Depth> depths_;
  std::unique_ptr<WeightGradInputs> w_;
  Slab dcat_, dh_, dprev_, demb_, dnext_, dout_, partial_;
};

}  // namespace mpf
