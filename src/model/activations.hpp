// What the forward pass saves for the backward (llm.c's ActivationTensors), and the buffers the
// backward writes activation gradients into. Each is one slab with named views, allocated once
// for a (B, T) batch and reused every step.
#pragma once

#include <string>

#include "core/bf16.hpp"
#include "core/types.hpp"
#include "model/config.hpp"
#include "model/layers/attention_path.hpp"
#include "model/positions.hpp"
#include "model/shard.hpp"
#include "parallel/groups.hpp"
#include "parallel/tp_regions.hpp"

namespace mpf {

// Shapes are a tensor-parallel rank's: C is the full width, and Ca = NH·hs/T (attention), Cqkv
// (the local [Q | K | V] width, shard.qkv), F = 4C/T or Llama's F/T (MLP), Fin (the local rows of
// fcw: F, or 2F for Llama's [gate | up]), NHl = NH/T and Vl = Vp/T (vocabulary shard) are the
// local ones (all full when T = 1).
// R = B·T rows; with sequence parallelism the LayerNorm/residual regions hold only this rank's
// Rl = R/T rows (their statistics and the residual stream), else Rl = R. LayerNorm outputs are
// kept gathered (R rows): the column-parallel GEMMs and their weight gradients read them.

// The pieces of the model one set of activations covers: a pipeline chunk of consecutive blocks,
// preceded by the embedding on the first virtual stage and followed by the head on the last.
// Without pipelining, the whole model.
struct ChunkPieces {
  int first_layer = 0;  // the chunk's first block, as a local index into the stage's parameters
  int layers = 0;       // blocks in the chunk
  bool embedding = true, head = true;
  // Full recomputation (--recompute): keep only each block's output, the next one's input; a
  // block's other activations are rebuilt before its backward in a one-block workspace.
  bool recompute = false;
  // Selective recomputation (--recompute selective, Korthikanti et al. 2022): keep the blocks'
  // inputs and the products' outputs, but not what is cheap to form again, which lives in one
  // block's scratch and W forms again before its weight gradients read it (selective_dropped).
  bool selective = false;
  // The head's logits in pieces of this many rows (0: all rows at once): the loss is computed
  // piece by piece and the backward recomputes each piece's logits, so the (rows, vocabulary)
  // logits never exist whole (head_chunk_rows says when).
  int logit_rows = 0;
  // Products in bf16 (--precision bf16): the activations autocast keeps in bf16 (bf16_kept) are
  // kept rounded to bf16, in half the bytes.
  bool bf16 = false;
  // The one-op scratch (bf16's staging and GELU/SwiGLU scratch, SP's row-parallel partial sums,
  // EP's dispatch buffers, selective recomputation's norm and GELU/SwiGLU outputs) left out of the
  // set's slab: the owner binds it (bind_scratch) to memory its sets share, as one op runs at a
  // time and none reads another's scratch.
  bool shared_scratch = false;
  // --p2p-dtype bf16 under full recomputation, a chunk without the head: its output (the last
  // block's) is not kept in the set but in the one-op scratch. The send right after the forward
  // rounds it into a bf16 wire buffer, nothing else reads it (no block's recomputation starts
  // from it, and B's recomputation writes it again), so a set keeps one block output fewer:
  // Megatron's set, which frees the output once sent (ModelStage checks that a send follows).
  bool lent_output = false;
  // --tp-comm-dtype bf16: the TP regions' collectives carry bf16 payloads (tp::SequenceSplit's
  // bf16, set on a TP group of 2 or more).
  bool tp_bf16 = false;
};

// Whether a chunk lends its output to the scratch (ChunkPieces::lent_output): bf16 messages under
// full recomputation, and a chunk that sends its output (not the head's).
inline bool lent_output(const ChunkPieces& c, bool recompute, bool p2p_bf16) {
  return p2p_bf16 && recompute && !c.head && c.layers > 0;
}

// Which activations a set with chunk.bf16 keeps in bf16, where autocast keeps them in bf16: the
// sublayers' inputs (a block's ln1 and ln2), Q, K and V after the q/k norms and the rotation
// (qkv), the attention's output (atty), the fc product's output (fch: GELU's input or SwiGLU's
// [gate | up]) and GELU's or SwiGLU's output, which a set with fch in bf16 does not keep at all:
// it is formed in one block's scratch (h_scratch) in the forward and again from fch in W. A
// mixture of experts keeps its experts' inputs after the dispatch (moe_in: ln2's rows rounded,
// as an expert's first product reads them), their [gate | up] (fch) and their outputs (moe_out,
// the down product's output, which the gates' gradients read) in bf16, SwiGLU's output formed
// again in W as the dense MLP's; its ln2 stays fp32, as the router (an fp32 product, as
// autocast's softmax is fp32) reads it. A shared expert (`shared`) keeps its [gate | up] and its
// output in bf16, its SwiGLU output formed again in W too. The residual stream, the norms'
// statistics, the router's probabilities, the shared expert's gate and the logsumexps stay fp32.
struct Bf16Kept {
  bool ln1 = false, ln2 = false, fch_gelu = false;
  bool qkv = false, atty = false, fch = false;
  bool moe_in = false, moe_out = false, shared = false;
};
Bf16Kept bf16_kept(const GPTConfig& cfg, const ChunkPieces& chunk);

// What a set with chunk.selective does not keep: the norms' outputs ln1 and ln2 (from the kept
// block input and residual2 and their statistics: one pass over C, and SP's all-gather, for 2 or
// 4 bytes of C a row each) and GELU's or SwiGLU's output (from the kept fc output: one pass,
// for 4F bytes a row in fp32; bf16 sets form it again anyway). Only weight gradients read them,
// so B needs none of them and W forms each in one block's scratch right before its product. A
// mixture of experts keeps ln2 and its experts' outputs (its router, gates and dispatch read them
// in B). The attention's output stays: forming it again is the attention's whole forward (and a
// ring pass under CP), for C values a row.
struct SelectiveDrop {
  bool ln1 = false, ln2 = false, h = false;
};
SelectiveDrop selective_dropped(const GPTConfig& cfg, const ChunkPieces& chunk);
// The floats a row of a bf16 set's staging holds: a norm's output (C), or [Q | K | V] and the
// attention's output side by side; the fc product's output passes through it in pieces of rows.
int64_t bf16_staging_width(const TpShard& shard);

// The rows of logits a chunk holding the head keeps at once when its W runs with its B
// (gpt_backward_by_block): all of them, returned as 0, unless the logits would dominate the
// chunk's memory — more floats a row than its blocks keep a row (with recomputation, only their
// outputs) and over 256 MB in all; then pieces of 2048 rows.
int head_chunk_rows(const TpShard& shard, const ChunkPieces& chunk, int B, int T,
                    bool sequence_parallel);
// All of a stage's blocks, with the edge pieces it holds.
ChunkPieces whole_stage(const TpShard& shard);

// What a mixture of experts' block needs beyond its tensors: its routing's integers (views into
// an int32 slab, null for a dense MLP) and the run around it.
struct MoeLayer {
  int32_t* choice = nullptr;  // (R·k) each token's experts
  int32_t* order = nullptr;   // (R·k) the slots sorted by expert
  int32_t* where = nullptr;   // (R·k) each slot's place in `order`
  int32_t* counts = nullptr;  // (E) slots per expert
  // (E) the same counts on the host, where the experts' products are launched from: the forward
  // writes them, B reads them (no copy back from the device per block and pass).
  int64_t* host_counts = nullptr;
  // (EP ranks, local experts) the rows this rank's experts received from each EP rank (with one
  // EP rank: host_counts).
  int64_t* host_received = nullptr;
  int seqs = 1;                 // the sequence rows the R tokens make (B)
  int64_t seq_len = 0;          // a whole sequence's tokens (T times the CP ranks)
  MPI_Comm cp = MPI_COMM_NULL;  // the ranks holding the rest of each sequence; null: none
  MPI_Comm ep = MPI_COMM_NULL;  // the EP ranks the tokens are exchanged with; null: none
  // Where the forward adds its balance losses (null: it does not, as in a recomputation or an
  // evaluation), and whether this rank is the one of its TP and CP ranks that adds them.
  double* aux = nullptr;
  bool adds_aux = true;
  // (E) where the forward adds its slots per expert over the step (with aux; null: it does not).
  float* load = nullptr;
  float dloss = 0.0f;  // d(objective)/d(a token's loss), which scales the balance loss's gradient
};

// One layer's slice of the saved activations.
struct LayerActivations {
  Tensor ln1;        // (R,C)
  Tensor ln1_mean;   // (Rl) LayerNorm only; empty for RMSNorm
  Tensor ln1_rstd;   // (Rl)
  Tensor qkv;        // (B,T,Cqkv) local [Q | K | V] (rotated, for Llama)
  Tensor qk_raw;     // (R,(NHl+KVHl)·hs) Q and K before their per-head norms (Qwen3), else empty
  Tensor qk_rstd;    // (R·(NHl+KVHl)) each head's 1/rms
  Tensor atty;       // (B,T,Ca) attention output before the projection
  Tensor lse;        // (B,NHl,T) each attention row's logsumexp (the fused attention's statistics)
  Tensor attn_out;   // (Rl,C) post-norm blocks (OLMo-2): the attention's output before its norm
  Tensor residual2;  // (Rl,C) residual + attention branch
  Tensor ln2;        // (R,C)
  Tensor ln2_mean;   // (Rl)
  Tensor ln2_rstd;   // (Rl)
  Tensor fch;        // (B,T,Fin) fc output before GELU, or Llama's [gate | up] before SwiGLU
  Tensor fch_gelu;   // (B,T,F) GELU's or SwiGLU's output
  Tensor mlp_out;    // (Rl,C) post-norm blocks: the MLP's output before its norm
  Tensor residual3;  // (Rl,C) block output
  // With chunk.bf16 (bf16_kept), ln1, ln2, qkv, atty, fch and fch_gelu are kept here instead.
  // ln1, ln2, qkv and atty above are then windows of the set's one-block fp32 staging: a norm's
  // output is formed there (and gathered under SP) before its rounding; Q, K and V are rounded
  // there in place, where every attention path reads them (and the backward widens the kept
  // copy), beside the attention's output before its rounding. fch and fch_gelu above are empty
  // (the fc product's output passes through the staging in pieces of rows). With fch kept,
  // fch_gelu_bf16 is the set's one-block scratch and recompute_h is set: W forms GELU's or
  // SwiGLU's output again from fch before the projection's weight gradient reads it.
  Tensor16 ln1_bf16, ln2_bf16, qkv_bf16, atty_bf16, fch_bf16, fch_gelu_bf16;
  Tensor staging;  // the set's fp32 staging (chunk.bf16), else empty
  bool recompute_h = false;
  // A mixture of experts' moe_in and moe_out kept in bf16 (bf16_kept; moe_in and moe_out then
  // empty): the experts' products read moe_in as it is and write fch and moe_out rounded, as
  // autocast's do (no staging); the combination and the gates' gradients read moe_out widened.
  // Under TP moe_out is this rank's partial sum, rounded (as Megatron's row-parallel output).
  Tensor16 moe_in_bf16, moe_out_bf16;
  // chunk.selective (selective_dropped): ln1 and ln2 (ln1_bf16 and ln2_bf16 under chunk.bf16, the
  // fp32 values then formed in the staging) are the set's one-block norm scratch, and W forms them
  // again; without chunk.bf16 a dense MLP's fch_gelu is one block's scratch and recompute_h is set.
  bool recompute_ln1 = false, recompute_ln2 = false;
  // A mixture of experts (else empty). The token side: this rank's R tokens and their R·k
  // (token, slot) pairs; the expert side: the rows this rank's experts receive, R·k·EP at most
  // (R·k without EP), by local expert, then by sending EP rank, then in its order. fch and
  // fch_gelu hold the expert side's rows.
  Tensor router_probs;  // (R,E) the router's probabilities
  Tensor gates;         // (R·k)
  Tensor moe_stats;     // (2,B,E) each sequence row's expert counts and probability sums
  Tensor moe_in;        // (R·k·EP,C) the experts' inputs
  Tensor moe_out;       // (R·k,C) the experts' outputs, back on the token side, in expert order
  Tensor moe_scratch;   // (2·R·k·EP,C) EP only: the dispatch's buffers (shared by the layers)
  // A shared expert (Qwen2-MoE's), on every row: [gate | up] before SwiGLU (R, 2Fs_l), SwiGLU's
  // output (R, Fs_l), its output before the gate (R, C; a partial sum over TP), the gate (R).
  // With bf16_kept's `shared`, shared_fch and shared_out are kept in their *_bf16 (shared_h
  // then empty) and shared_h_bf16 is the one-block scratch (recompute_h: W forms it again), or
  // under --recompute the W inputs' kept copy.
  Tensor shared_fch, shared_h, shared_out, shared_gate;
  Tensor16 shared_fch_bf16, shared_h_bf16, shared_out_bf16;
  MoeLayer moe;
  // Multi-head latent attention's projections and norms (model/mla_block.hpp lays them out).
  Tensor mla;
};
// A post-norm block (OLMo-2) keeps the same tensors with these meanings: ln1 and ln2 hold the
// sublayers' gathered inputs (the block input and residual2, what the column-parallel GEMMs
// read), and ln1_* and ln2_* the statistics of the norms of attn_out and mlp_out.

class RingAttention;

struct Activations {
  int B = 0, T = 0;  // T: the rows of each sequence this rank holds (all of it without CP)
  GPTConfig cfg;
  TpShard shard;
  ChunkPieces chunk;
  tp::SequenceSplit seq;
  // Where the T rows sit in their sequence (all of it, or context parallelism's two chunks), and
  // the ring that attends over the other CP ranks' chunks (null without CP; the stage owns it).
  PositionRuns positions;
  RingAttention* ring = nullptr;
  // The groups the blocks communicate over beyond their TP regions (EP's, the kv group), set by
  // whoever owns the set (the stage, the decoder) from the run's bundle.
  ModelGroups groups;
  // The attention the blocks call (--attention; the ring's own calls take the ring's).
  AttentionPath attention = AttentionPath::kFused;
  // (B,T) the position where each row's document starts (--doc-mask), or null: set per microbatch.
  const int32_t* doc_start = nullptr;
  Slab slab;
  Tensor rope_cos, rope_sin;  // (T,hs/2) Llama's rotary tables for the rows' positions; else empty
  Tensor input;               // (Rl,C) the chunk's input: the embedding's output, or received
  // (Rl,C) the received gradient of the output (chunks without the head): not in the slab, the
  // stage's pooled receive buffer, bound from the receive until B
  Tensor output_grad;
  // (Rl,C) with the head: a gradient of the output from beyond the head (the multi-token
  // prediction modules', model/mtp.hpp), which the backward adds to the head's; empty: none.
  Tensor extra_output_grad;
  Tensor partial;   // (R,C) a row-parallel output before its reduce-scatter (sequence parallel)
  Tensor lent_out;  // (Rl,C) with chunk.lent_output, the last block's output (scratch)
  // Per-layer tensors, each (chunk.layers, ...) with block i of the chunk at offset i * (its
  // per-layer size).
  Tensor ln1, ln1_mean, ln1_rstd, qkv, qk_raw, qk_rstd, atty, lse, attn_out, residual2, ln2,
      ln2_mean, ln2_rstd, fch, fch_gelu, mlp_out, residual3;
  // chunk.bf16: those kept in bf16 (each then empty above), one block's fp32 staging (R rows of
  // bf16_staging_width) and, with fch kept, one block's GELU or SwiGLU output (h_scratch):
  // LayerActivations::ln1_bf16 says how the blocks use them.
  Tensor16 ln1_bf16, ln2_bf16, qkv_bf16, atty_bf16, fch_bf16, fch_gelu_bf16, h_scratch;
  Tensor staging;
  // chunk.selective: one block's norm output (ln1, then ln2; in bf16 under chunk.bf16) and, fp32
  // with a dense MLP, GELU's or SwiGLU's output (LayerActivations::recompute_ln1).
  Tensor norm_scratch, h_scratch32;
  Tensor16 norm_scratch16;
  // A mixture of experts' (per layer like the above, but moe_out one scratch), and its integers.
  Tensor router_probs, gates, moe_stats, moe_in, moe_out, moe_scratch;
  Tensor16 moe_in_bf16, moe_out_bf16;
  Tensor shared_fch, shared_h, shared_out, shared_gate;
  Tensor16 shared_fch_bf16, shared_h_bf16, shared_out_bf16;
  Tensor mla;  // multi-head latent attention's, per layer (LayerActivations::mla)
  // The routing's int32 values (MoeLayer's), each 4 bytes of the float slab: the slab's other
  // views never touch them.
  Tensor moe_ints;
  // (L,2E) MoeLayer::host_counts and host_received
  Kokkos::View<int64_t*, HostSpace> moe_host_counts;
  double* moe_aux = nullptr;  // MoeLayer::aux of every layer (ModelStage sets it)
  float* moe_load = nullptr;  // (the stage's blocks, E): MoeLayer::load of its block at its index
  // --qk-clip: (the stage's blocks, NHl) each head's largest attention logit this step, kept by
  // max at its block's index; null when not measured. qk_rows (B,NHl,T) is the attention's rows'
  // largest logits on the way there (the stage's, shared by its sets).
  float* qk_max = nullptr;
  Tensor qk_rows;
  float dloss = 0.0f;  // MoeLayer::dloss (the backward sets it)
  // The head's (empty unless chunk.head):
  Tensor lnf;            // (R,C)
  Tensor lnf_mean;       // (Rl)
  Tensor lnf_rstd;       // (Rl)
  Tensor logits;         // (B,T,Vl) logits, or dlogits once the classifier has run with a dloss
  Tensor16 logits_bf16;  // chunk.bf16: the logits kept in bf16 instead (logits then empty)
  Tensor row_stats;  // (3,B,T) per-row max, sum of exponentials and target logit (vocab-parallel)
  Tensor losses;     // (B,T)
  // The d(objective)/d(a token's loss) a training step's forward knows (ModelStage sets it; 0: an
  // evaluation, or not known): with it the head's forward leaves dlogits in the logits in the
  // loss's pass. logits_dloss: the dloss whose dlogits the logits hold (0: still the logits).
  float forward_dloss = 0.0f, logits_dloss = 0.0f;

  // positions: where the T rows sit (default: positions 0..T-1).
  static Activations allocate(const TpShard& shard, const ChunkPieces& chunk, int B, int T,
                              bool sequence_parallel = false,
                              const PositionRuns* positions = nullptr);
  // The whole stage (the whole model without pipelining).
  static Activations allocate(const TpShard& shard, int B, int T, bool sequence_parallel = false);
  static Activations allocate(const GPTConfig& cfg, int B, int T);
  // The bytes allocate() would take.
  static int64_t bytes(const TpShard& shard, const ChunkPieces& chunk, int B, int T,
                       bool sequence_parallel = false);
  // The bytes of the one-op scratch a set of `chunk` takes in its slab without shared_scratch.
  static int64_t scratch_bytes(const TpShard& shard, const ChunkPieces& chunk, int B, int T,
                               bool sequence_parallel = false);
  // Binds a set allocated with chunk.shared_scratch to the scratch at `base` (scratch_bytes).
  void bind_scratch(float* base);
  // Block i of the chunk (0 <= i < chunk.layers).
  LayerActivations layer(int i) const;
  // The input of block i: the chunk's input for i = 0, else block i-1's output.
  Tensor block_input(int i) const;
  // The chunk's output: its last block's, what the next stage receives (or the head reads).
  Tensor output() const;
};

// The scratch of B, one block at a time: the activation gradients no weight gradient reads (the
// residual stream's gradient ping-pongs between blocks under sequence parallelism, whose
// LayerNorm regions hold this rank's rows only) and the attention's row terms.
struct BackwardBuffers {
  Slab slab;
  Tensor
      dresidual[2];   // (Rl,C) sequence parallel: a block's input/output gradient, this rank's rows
  Tensor dresidual2;  // (Rl,C) sequence parallel: gradient of residual2, this rank's rows
  Tensor partial;     // (R,C) sequence parallel: a partial input gradient before its reduce-scatter
  Tensor datty;       // (B,T,Ca)
  Tensor dmlp;        // (B,T,F) Llama: the gradient of SwiGLU's output; else empty
  Tensor delta;       // (B,NHl,T) the attention backward's row terms
  Tensor qk_sums;     // (R,2) q/k norms over the whole projection: each row's sums over TP
  // A mixture of experts: the block output's gradient gathered (R,C), the slots' output
  // gradients and then their input gradients (R·k,C, token side), the gates' gradients (R·k).
  Tensor moe_dout, moe_dy, dgates;
  // A shared expert: the gradient of its SwiGLU output (R, Fs_l).
  Tensor dshared_h;
  // Multi-head latent attention's scratch (model/mla_block.hpp lays it out), and the gradient of
  // its packed [Q | K | V] (R, Cqkv), which its W does not read (BlockWeightInputs::dqkv empty).
  Tensor mla, dqkv;

  static BackwardBuffers allocate(const TpShard& shard, int B, int T,
                                  bool sequence_parallel = false);
  static BackwardBuffers allocate(const GPTConfig& cfg, int B, int T);
  // The bytes allocate() would take.
  static int64_t bytes(const TpShard& shard, int B, int T, bool sequence_parallel = false);
};

// What one block's W reads besides its parameters: the gradients of its layers' outputs, which B
// computes (Zero Bubble's ∇zL), and, under full recomputation, the activations W reads, which B's
// recomputation rebuilds. All-row tensors are gathered under sequence parallelism.
struct BlockWeightInputs {
  // A post-norm block's (OLMo-2) with the same shapes: dout and dres2 hold the gradients of
  // mlp_out and attn_out (the projections' outputs), dln2 and dln1 those of the norms' outputs
  // (the block output's and residual2's).
  Tensor dout;   // (R,C) gradient of the block's output (the MLP projection's output)
  Tensor dfch;   // (B,T,Fin) gradient of the fc output before GELU or SwiGLU
  Tensor dln2;   // (Rl,C) gradient of ln2's output, summed over TP
  Tensor dres2;  // (R,C) gradient of residual2 (the attention projection's output)
  Tensor dqkv;   // (B,T,Cqkv) (before the rotation, for Llama); latent attention: empty
  // The q/k norms' weight gradients (TpShard::qk_norm_weight_grad), which B computes while it
  // still has the normalised values' gradient; else empty.
  Tensor dqk_normw;
  Tensor dln1;  // (Rl,C) gradient of ln1's output, summed over TP
  // A mixture of experts: dout and dfch hold the expert side's rows (dout the experts' output
  // gradients, gated), drouter the router logits' gradient (R,E) and counts (local experts, on
  // the host) the rows of each of this rank's experts in B, kept for W (a recomputation may
  // reroute the block's activations meanwhile).
  Tensor drouter;
  int64_t* counts = nullptr;
  // A shared expert: its output's gradient, gated (R, C), its [gate | up]'s (R, 2Fs_l), and its
  // gate logit's (R).
  Tensor shared_dout, shared_dfch, shared_dgate;
  // Multi-head latent attention's projections' output gradients and its norms' weight gradients
  // (model/mla_block.hpp lays them out).
  Tensor dmla;
  // --recompute only (else empty): ln1, ln1_mean, ln1_rstd, atty, attn_out, residual2, ln2,
  // ln2_mean, ln2_rstd, fch_gelu, mlp_out, moe_in, shared_h and mla of the block (those kept in
  // bf16 in their *_bf16); the rest of `kept` stays empty.
  LayerActivations kept;
};

// A (microbatch, chunk)'s W inputs, kept from its B until its W (the deferred weight gradient):
// one slab, each tensor (chunk.layers, its per-block size) like the activations' per-layer ones,
// plus the head's and the embedding's. B writes them, W reads them; the head's W also reads the
// dlogits B leaves in the activations.
struct WeightGradInputs {
  ChunkPieces chunk;
  tp::SequenceSplit seq;
  TpShard shard;
  int B = 0, T = 0;
  Slab slab;
  Tensor dout, dfch, dln2, dres2, dqkv, dln1, dqk_normw, drouter, shared_dout, shared_dfch,
      shared_dgate, dmla;                    // per block, as in
                                             // BlockWeightInputs
  Kokkos::View<int64_t*, HostSpace> counts;  // (L,E)
  // --recompute: the per-block activations W reads (empty otherwise); with chunk.bf16 those kept
  // in bf16 (bf16_kept) are in the *_bf16 ones.
  Tensor ln1, ln1_mean, ln1_rstd, atty, attn_out, residual2, ln2, ln2_mean, ln2_rstd, fch_gelu,
      mlp_out, moe_in, shared_h, mla;
  Tensor16 ln1_bf16, ln2_bf16, atty_bf16, fch_gelu_bf16, moe_in_bf16, shared_h_bf16;
  Tensor dlnf;    // (Rl,C) the head's: gradient of the final LayerNorm's output, summed over TP
  Tensor dembed;  // (R,C) the embedding's: gradient of its output (block 0's input gradient)

  static WeightGradInputs allocate(const TpShard& shard, const ChunkPieces& chunk, int B, int T,
                                   bool sequence_parallel = false);
  // The whole model (no pipelining, no TP).
  static WeightGradInputs allocate(const GPTConfig& cfg, int B, int T);
  // The bytes allocate() would take.
  static int64_t bytes(const TpShard& shard, const ChunkPieces& chunk, int B, int T,
                       bool sequence_parallel = false);
  // Block i of the chunk (0 <= i < chunk.layers).
  BlockWeightInputs block(int i) const;
};

// Bytes of a slab, for the memory report.
inline int64_t bytes_of(const Slab& s) {
  return int64_t(s.extent(0)) * int64_t(sizeof(float));
}

}  // namespace mpf
