// The model behind the schedule interface (pipeline::StageOps) with real tensors: what the
// schedule loops and the table executor drive in the trainer. A rank holds V chunks of the model
// (its stage's layers, layer_ownership.hpp); activations flow between stages through PipelineP2P.
// With --pp 1 the one chunk is the whole model, every verb is a no-op, and a schedule is gradient
// accumulation over M microbatches.
//
// B and W are separate calls (the zero-bubble schedules run W apart from B): backward_input
// computes the input gradients and keeps what the chunk's W reads (its layers' output gradients, a
// WeightGradInputs set) until backward_weight computes the parameter gradients, whenever the
// schedule runs it.
//
// Memory. With --recompute a microbatch keeps only its blocks' outputs (Megatron's full
// recomputation): each block's forward runs again in one workspace right before its B, which then
// also keeps the activations W reads in the W set. With --recompute selective a microbatch keeps
// all but the norms' and GELU's or SwiGLU's outputs, which W forms again in the sets' shared
// one-block scratch (ChunkPieces::selective, set by model_builder). Activations and W sets are
// pooled per chunk: forward (or the receive of its input) takes an activation set and B a W set,
// allocating only while a pool is smaller than the most ever in use, and W returns both, so the
// peak bytes are what the schedule keeps (AFAB holds M microbatches, 1F1B at most P − rank, each
// with a W set between its B and its W). An input gradient goes out of its own buffer, which is
// reused once MPI reports that send complete (sends stay in flight, p2p.hpp), and an output's
// gradient comes into one from the receive's posting until its B: both pools grow to the most the
// schedule has in flight (the simulator's peak_grad_sends and peak_grad_receives), not one buffer
// per set held.
#pragma once

#include <mpi.h>

#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "model/activations.hpp"
#include "model/gpt.hpp"
#include "model/layers/ring_attention.hpp"
#include "model/mtp.hpp"
#include "model/parameters.hpp"
#include "parallel/groups.hpp"
#include "pipeline/p2p.hpp"
#include "pipeline/stage_ops.hpp"

namespace mpf {

// What a rank's ops cost, summed since begin_step (milliseconds), for the bench and the trace.
struct StageTimes {
  double forward = 0.0, backward = 0.0, weight = 0.0;  // compute: F, B, W
  int forwards = 0, backwards = 0, weights = 0;        // (mb, chunk) ops
};

// One op on a rank's timeline: what ran, and when (seconds since the recorder's origin).
struct StageEvent {
  const char* name;  // "F", "B", "W", a P2P verb
  int mb, chunk;
  double start, end;
};

class ModelStage : public pipeline::StageOps {
 public:
  // shard: this rank's stage (restrict_to_stage); groups: the run's bundle, of which the stage
  // takes the pipeline's (a 1-rank one without PP), the context-parallel ranks' (a 1-rank one
  // without CP: each holds seq_len rows of every sequence, its two chunks (ring_attention.hpp), of
  // sequences seq_len·|cp| long) and the model's (ModelGroups); chunks: its V chunks in order, as
  // local layer ranges of the shard's parameters. recompute: keep only block outputs per
  // microbatch and rebuild the rest before each block's backward (--recompute full; the chunks
  // carry selective recomputation themselves). placement: where
  // the chunks of all ranks run. attention: the path every attention call takes (--attention).
  // backward false: the forward alone (mpiformer-eval), without B's buffers; B must not run.
  // pipeline/model_builder.hpp builds it.
  ModelStage(const TpShard& shard, const ParallelGroups& groups, std::vector<ChunkPieces> chunks,
             int micro_batch, int seq_len, bool sequence_parallel, bool recompute = false,
             pipeline::ChunkPlacement placement = pipeline::ChunkPlacement::kLooped,
             AttentionPath attention = AttentionPath::kFused, bool backward = true);

  // What the next step runs on: the microbatches' tokens, the parameters and their gradients,
  // dloss (d total loss / d each token's loss), and the hook told of each part (block, head,
  // embedding) whose gradients are final: after the last W of its chunk; may be empty. doc_starts:
  // each microbatch's (B,T) document starts under --doc-mask, else null.
  void begin_step(const std::vector<Tokens>* inputs, const std::vector<Tokens>* targets,
                  const ParameterTensors* params, ParameterTensors* grads, float dloss,
                  PartDone part_done, const std::vector<Tokens>* doc_starts = nullptr);
  // Completes the sends still in flight (their buffers become reusable).
  void end_step();
  // Validation: the forward passes alone through the pipeline, outside any step; returns the sum
  // of the per-token losses on the last stage, 0 on the others. On the last stage `losses`, if
  // given, is told each microbatch's per-token losses (B,T) while they are valid.
  using LossesSeen = std::function<void(int mb, const Tensor& losses)>;
  double evaluate(const ParameterTensors& params, const std::vector<Tokens>& inputs,
                  const std::vector<Tokens>& targets,
                  const std::vector<Tokens>* doc_starts = nullptr, const LossesSeen& losses = {});
  // Σ of the per-token losses of the microbatches forwarded since begin_step (last stage; 0 on
  // the others): added up in the kernels' memory, read to the host here, once a step.
  double loss_sum() const;
  // The step's balance losses so far (mixtures of experts): the sum over this rank's rows and
  // blocks, each counted on one of its TP and CP ranks.
  double aux_sum() const;
  // The step's multi-token prediction loss so far, λ/D · Σ_k T/(T−k) · Σ of depth k's valid
  // per-token losses (0 without modules, or off the head's stage).
  double mtp_sum() const;
  // Runs the multi-token prediction modules the shard holds with the head, weighted λ
  // (--mtp-weight). Before the first step.
  void enable_mtp(float weight);
  // The step's (token, slot) choices of each expert in each of this stage's blocks (local block
  // index, expert), counted on one of each TP and CP group's ranks; empty for a dense model.
  std::vector<float> expert_load() const;
  // --qk-clip: from the next step the blocks record each head's largest attention logit (the
  // fused attention measures it). Before the first step.
  void measure_qk_logits();
  // The step's largest attention logit of each (local block, local head), −∞ where none was
  // seen; empty unless measured.
  std::vector<float> qk_logit_max() const;
  // The most bytes of activations and W sets held at once, and the most (mb, chunk)s held (from
  // their forward's input to their W) at once.
  int64_t peak_activation_bytes() const { return peak_bytes_; }
  int peak_held() const { return peak_held_; }
  // One microbatch's activations through all of this rank's chunks, and its W sets (what waits
  // from a B to its W).
  int64_t microbatch_bytes() const;
  int64_t weight_input_bytes() const;
  // The backward buffers, the sets' shared scratch, under recomputation the one-block workspace,
  // and the ring's messages.
  int64_t buffer_bytes() const {
    return bytes_of(buffers_.slab) + bytes_of(scratch_) +
           (workspace_ ? bytes_of(workspace_->slab) : 0) + (ring_ ? ring_->buffer_bytes() : 0);
  }
  // Where this rank's rows sit in each sequence.
  const PositionRuns& positions() const { return positions_; }
  const StageTimes& times() const { return times_; }
  // Whether each F, B and W waits for its kernels at its end, so that times() are their run
  // times and not their launch times. Nothing else needs that wait (a send waits for what it
  // sends, parallel/device_mpi.hpp): on a GPU the trainer turns it on only for the steps whose op
  // times it uses. On by default.
  void set_op_timing(bool on) { time_ops_ = on; }
  // The classic schedules run W right after B: then B computes each block's W as soon as its B is
  // done (gpt_backward_by_block), W is empty, and a microbatch's W inputs take two blocks' memory
  // rather than its chunk's. Off (the default) for the zero-bubble schedules, which defer W.
  // With it, a chunk holding the head keeps its logits in pieces when they would take over 256 MB
  // whole (activations.hpp's head_chunk_rows). Before the first step.
  void set_weight_with_input(bool on);
  // --p2p-dtype bf16: activations and their gradients travel between stages as bf16
  // (PipelineP2P::set_bf16). Before the first step.
  void set_p2p_bf16(bool on) { p2p_.set_bf16(on); }
  // Records every op into `events` (with times from `clock`, seconds) while set; null stops it.
  void record(std::vector<StageEvent>* events, std::function<double()> clock);
  // Tells `listener` each op as it starts (its name, microbatch and chunk): the watchdog's phase.
  void on_op(std::function<void(const char* name, int mb, int chunk)> listener) {
    on_op_ = std::move(listener);
  }

  void forward(int mb, int chunk) override;
  void backward_input(int mb, int chunk) override;
  void backward_weight(int mb, int chunk) override;
  void recv_forward(int mb, int chunk) override;
  void send_forward(int mb, int chunk) override;
  void recv_backward(int mb, int chunk) override;
  void send_backward(int mb, int chunk) override;
  void send_forward_recv_backward(int send_mb, int send_chunk, int recv_mb,
                                  int recv_chunk) override;
  void send_backward_recv_forward(int send_mb, int send_chunk, int recv_mb,
                                  int recv_chunk) override;
  void send_forward_recv_forward(int send_mb, int send_chunk, int recv_mb, int recv_chunk) override;
  void send_backward_recv_backward(int send_mb, int send_chunk, int recv_mb,
                                   int recv_chunk) override;
  void post_recv_forward(int mb, int chunk) override;
  void post_recv_backward(int mb, int chunk) override;

 private:
  using Key = std::pair<int, int>;  // (microbatch, chunk)
  Activations* acquire(int chunk);
  // A new set of a chunk's activations (or the workspace), knowing its rows' positions and ring.
  std::unique_ptr<Activations> allocate(const ChunkPieces& chunk) const;
  // The multi-token prediction modules' backward for microbatch mb, before the head's chunk's
  // (whose set `a` then holds the gradient they give its output).
  void backward_mtp(int mb, Activations& a);
  void release(int chunk, Activations* a);
  WeightGradInputs* acquire_weight_inputs(int chunk);
  // The pieces a chunk's W set covers: the chunk, or two of its blocks when W runs with B.
  ChunkPieces weight_pieces(int chunk) const;
  // The buffers a receive of (mb, chunk) fills: its input, or its output's gradient.
  float* grad_buffer(int mb, int chunk);
  // The activations of (mb, chunk), forward done or input received; fatal if none.
  Activations* live(int mb, int chunk) const;
  // Activations for (mb, chunk) about to receive their input.
  float* input_buffer(int mb, int chunk);
  Tensor take_grad_buffer();
  const float* sent_grad(int mb, int chunk);
  // A lent output (ChunkPieces::lent_output) lives in the scratch from its forward to its send,
  // which must come next: a compute op in between is fatal, not a silent overwrite.
  void check_lent_output_sent() const;
  void sent_output(int mb, int chunk);
  // Runs op() and records it as `name` on the timeline, if one is set.
  template <class Op>
  void timed(const char* name, int mb, int chunk, Op op);

  TpShard shard_;
  std::vector<ChunkPieces> chunks_;
  int micro_batch_, seq_len_;
  bool sequence_parallel_;
  ModelGroups groups_;  // what each set of activations communicates over
  MPI_Comm tp_;
  MPI_Comm cp_;  // the ranks holding the rest of each sequence (the MTP modules' tokens)
  AttentionPath attention_;
  // With CP; the stage owns it, and each set of activations points at it (Activations::ring).
  std::unique_ptr<RingAttention> ring_;
  PositionRuns positions_;
  PipelineP2P p2p_;
  BackwardBuffers buffers_;
  std::unique_ptr<Activations> workspace_;  // --recompute: one block's activations
  // The one-op scratch every set of activations shares (ChunkPieces::shared_scratch).
  Slab scratch_;
  std::vector<std::vector<std::unique_ptr<Activations>>> pool_;  // per chunk
  std::vector<std::vector<Activations*>> free_;                  // per chunk
  std::map<Key, Activations*> live_;
  std::vector<std::vector<std::unique_ptr<WeightGradInputs>>> weight_pool_;  // per chunk
  std::vector<std::vector<WeightGradInputs*>> weight_free_;                  // per chunk
  std::map<Key, WeightGradInputs*> awaiting_w_;                              // B done, W not yet
  std::vector<Slab> grad_pool_;          // input-gradient send buffers
  std::vector<Slab> received_pool_;      // received output gradients' buffers
  std::vector<float*> received_free_;    // of received_pool_, not holding a gradient
  std::map<Key, Tensor> pending_grads_;  // computed by backward, not yet sent
  int64_t live_bytes_ = 0, peak_bytes_ = 0;
  int held_ = 0, peak_held_ = 0;
  const std::vector<Tokens>* inputs_ = nullptr;
  const std::vector<Tokens>* targets_ = nullptr;
  const std::vector<Tokens>* doc_starts_ = nullptr;
  const ParameterTensors* params_ = nullptr;
  ParameterTensors* grads_ = nullptr;
  float dloss_ = 0.0f;
  PartDone part_done_;
  std::vector<int> weights_done_;  // per chunk, this step
  // In the kernels' memory: Σ of the step's per-token losses, and evaluate()'s.
  // The step's loss, an evaluation's, the step's balance losses and its MTP loss (scaled).
  Kokkos::View<double*, MemSpace> loss_sums_{"mpf::stage::loss_sums", 4};
  // The multi-token prediction modules (model/mtp.hpp) on the head's stage; null: none.
  std::unique_ptr<MtpModules> mtp_;
  int mtp_backwards_ = 0;  // this step's
  Slab expert_load_;       // (local blocks, E), zeroed at each step's start
  // --qk-clip: (local blocks, heads) the step's largest logits, −∞ at each step's start, and the
  // attention's (B, heads, T) rows of them on the way.
  Slab qk_max_, qk_rows_;
  StageTimes times_;
  bool time_ops_ = true;
  bool by_block_ = false;
  Key unsent_{-1, -1};  // the forward whose lent output awaits its send
  std::vector<StageEvent>* events_ = nullptr;
  std::function<void(const char*, int, int)> on_op_;
  std::function<double()> clock_;
};

}  // namespace mpf
