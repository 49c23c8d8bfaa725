// GPT-2 as llm.c's train_gpt2.c defines it, in pieces a pipeline stage can own:
//   embedding -> L pre-LN blocks -> head (final LayerNorm, logits tied to wte, cross-entropy).
// A Llama-family model (Hugging Face's LlamaForCausalLM) is the same pieces with RMSNorm for
// LayerNorm, no position table, rotary embeddings on Q and K, grouped-query attention, a SwiGLU
// MLP, no biases, and its own LM head (lmhead) when untied.
// Every piece has a forward, an input-gradient backward (B) and a weight-gradient backward (W).
// B leaves what W reads in a WeightGradInputs, so a chunk's W may run any time after its B (the
// zero-bubble schedules defer it); B's scratch, the BackwardBuffers, is free again once B returns.
//
// Tensor parallel (Megatron): the pieces work on the rank's shard (acts.shard) and communicate
// over `tp` only through tp_regions.hpp's regions and the vocab-parallel cross-entropy; with a
// 1-rank `tp` (MPI_COMM_SELF) they are the serial model. With sequence parallelism (acts.seq)
// the residual stream and the LayerNorms hold this rank's rows only: dinp/dout of a block are
// (Rl,C), and the LayerNorm weight gradients, taken from those rows, are summed over `tp` in W.
#pragma once

#include <mpi.h>

#include <functional>

#include "core/types.hpp"
#include "model/activations.hpp"
#include "model/parameters.hpp"

namespace mpf {

// The family's normalisation of N rows: GPT-2's LayerNorm (weight and bias; mean and rstd kept)
// or Llama's RMSNorm (weight only; rstd kept, bias and mean empty views).
void model_norm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight,
                        Tensor bias, int64_t N, const GPTConfig& cfg);
// The LM head's weight: wte when tied, else lmhead.
const Tensor& head_weight(const ParameterTensors& t, const GPTConfig& cfg);
Tensor& head_weight(ParameterTensors& t, const GPTConfig& cfg);

// ---- forward ----
void embedding_forward(Activations& acts, const ParameterTensors& params, const Tokens& inputs,
                       MPI_Comm tp);
void block_forward(Activations& acts, const ParameterTensors& params, int l, MPI_Comm tp);
// The same block on any rows, its attention core given: attend(atty, qkv) writes this rank's
// heads' outputs (R,Ca) from their packed (R,3Ca) [Q | K | V]. block_forward attends causally
// within each sequence of the batch; the generator attends over its KV cache
// (generate/decoder.hpp). `x` (Rl,C) is the block's input, a.residual3 (Rl,C) receives its
// output, a.lse is not touched; `partial` (R,C) is scratch under sequence parallelism.
// A Llama block rotates Q and K first: row n of the R rows is at position pos0 + n % T, its
// angles in the rotary tables `cos`, `sin` (positions, hs/2); GPT-2 ignores them.
using AttentionCore = std::function<void(Tensor atty, Tensor qkv)>;
struct RopePositions {
  Tensor cos, sin;
  int T = 1, pos0 = 0;
};
void block_forward(const LayerActivations& a, Tensor x, Tensor partial, const LayerParameters& p,
                   const TpShard& s, const tp::SequenceSplit& seq, MPI_Comm tp,
                   const RopePositions& rope, const AttentionCore& attend);
// Final LayerNorm, logits and per-token losses (acts.losses).
void head_forward(Activations& acts, const ParameterTensors& params, const Tokens& targets,
                  MPI_Comm tp);

// Elements of the bf16 roundings gpt_backward_by_block keeps of a block's output gradients
// between its B and its W under bf16 products (none for a mixture of experts or latent
// attention, whose B reads them in pieces): the memory plan's.
int64_t held_output_gradient_elems(const TpShard& s, int64_t R);

// ---- backward ----
// With chunk.logit_rows (logits in pieces, only under gpt_backward_by_block): the head's B and W
// together, piece by piece, each piece's logits recomputed.
void head_backward_in_pieces(ParameterTensors& grads, BackwardBuffers& buf, WeightGradInputs& w,
                             Activations& acts, const ParameterTensors& params,
                             const Tokens& targets, float dloss, MPI_Comm tp, Tensor dout,
                             bool final_microbatch);
// dloss = d(total loss)/d(each token's loss). Leaves dlogits in the logits (bf16 ones too), the
// final LayerNorm's output gradient in w.dlnf and the gradient of the last block's output, this
// rank's rows, in dout.
void head_backward_input(BackwardBuffers& buf, WeightGradInputs& w, Activations& acts,
                         const ParameterTensors& params, const Tokens& targets, float dloss,
                         MPI_Comm tp, Tensor dout);
// final_microbatch: the last accumulation into these gradients this step; under SP it is then
// that the LayerNorm gradients, accumulated from this rank's rows, are summed over TP (once).
void head_backward_weight(ParameterTensors& grads, const WeightGradInputs& w,
                          const Activations& acts, MPI_Comm tp, bool final_microbatch = true);
// dinp (Rl,C) = gradient of block l's input, from dout (Rl,C), its output's gradient; the
// gradients W reads go to `w` (without SP, dout must be w.dout).
void block_backward_input(BackwardBuffers& buf, const BlockWeightInputs& w, Tensor dinp,
                          Tensor dout, const Activations& acts, const ParameterTensors& params,
                          int l, MPI_Comm tp);
// params: what selective recomputation forms the norms' outputs again with (the step's, which
// W does not change).
void block_backward_weight(ParameterTensors& grads, const BlockWeightInputs& w,
                           const Activations& acts, const ParameterTensors& params, int l,
                           MPI_Comm tp, bool final_microbatch = true);
// dembed (R,C): the gradient of the embedding's output, all rows.
void embedding_backward_weight(ParameterTensors& grads, Tensor dembed, const Activations& acts,
                               const Tokens& inputs);

// ---- the pieces acts.chunk covers (the whole model without pipelining) ----
// A chunk without the embedding starts from acts.input (received); one without the head leaves
// its output in acts.output() (to send) and no loss.
// With acts.chunk.recompute, `workspace` (one block, no edge pieces) holds each block's
// activations in turn, and B runs each block's forward again there first, keeping what W reads.
void gpt_forward(Activations& acts, const ParameterTensors& params, const Tokens& inputs,
                 const Tokens& targets, MPI_Comm tp = MPI_COMM_SELF,
                 Activations* workspace = nullptr);
// B: the input gradients, last block first. Without the head it starts from acts.output_grad
// (received); without the embedding it writes the gradient of acts.input into input_grad (to
// send). What the chunk's W reads goes to `w` (allocated for acts.chunk).
void gpt_backward_input(BackwardBuffers& buf, WeightGradInputs& w, Activations& acts,
                        const ParameterTensors& params, const Tokens& targets, float dloss,
                        MPI_Comm tp = MPI_COMM_SELF, Tensor input_grad = {},
                        Activations* workspace = nullptr);
// A part of the model whose W has just run: the LM head (lnf, and wte as the head's weight), one
// block (its index among this rank's blocks), or the embedding (wte, wpe).
struct ModelPart {
  enum class Kind { kHead, kBlock, kEmbedding } kind;
  int block = -1;
};
using PartDone = std::function<void(ModelPart)>;

// W: accumulates (+=) the chunk's parameter gradients from `w` and the activations, in the order
// the serial backward takes them (head, last block first, embedding). part_done(p), if given, is
// called after each part's W: the gradients that part writes are then final for this batch,
// which is when a data-parallel bucket holding them may start its reduction. With gradient
// accumulation, final_microbatch marks the step's last W of this chunk (pass part_done then only).
void gpt_backward_weight(ParameterTensors& grads, const WeightGradInputs& w,
                         const Activations& acts, const ParameterTensors& params,
                         const Tokens& inputs, MPI_Comm tp = MPI_COMM_SELF,
                         const PartDone& part_done = {}, bool final_microbatch = true,
                         Activations* workspace = nullptr);
// B and W block by block, as the classic schedules run them (W right after B): the head's B and
// W, then for each block from the last its B and its W, then the embedding's W. `w2` holds the W
// inputs of two blocks (allocated for a chunk of min(2, layers) blocks with acts.chunk's head and
// embedding, and without recompute: W reads a recomputed block's activations from the workspace):
// block i uses slot i % 2 and writes its input gradient into the other, so a chunk's W inputs
// take two blocks' memory instead of all of its blocks'. The gradients and the calls to
// part_done are those of gpt_backward_input then gpt_backward_weight, in the same order of sums.
void gpt_backward_by_block(ParameterTensors& grads, BackwardBuffers& buf, WeightGradInputs& w2,
                           Activations& acts, const ParameterTensors& params, const Tokens& inputs,
                           const Tokens& targets, float dloss, MPI_Comm tp, Tensor input_grad,
                           Activations* workspace, const PartDone& part_done,
                           bool final_microbatch);

// B then W at once (the serial backward).
void gpt_backward(ParameterTensors& grads, BackwardBuffers& buf, WeightGradInputs& w,
                  Activations& acts, const ParameterTensors& params, const Tokens& inputs,
                  const Tokens& targets, float dloss, MPI_Comm tp = MPI_COMM_SELF,
                  const PartDone& part_done = {}, bool final_microbatch = true,
                  Tensor input_grad = {}, Activations* workspace = nullptr);

}  // namespace mpf
