#include "pipeline/model_stage.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/stopwatch.hpp"
#include "core/transfer.hpp"
#include "model/gpt.hpp"
#include "parallel/rank_activity.hpp"
#include "pipeline/stage_program.hpp"

namespace mpf {

using pipeline::op_name;
using pipeline::OpKind;

namespace {
int64_t message_floats(const TpShard& shard, int B, int T, bool sequence_parallel) {
  const bool sp = sequence_parallel && shard.size > 1;
  return int64_t(B) * T / (sp ? shard.size : 1) * shard.cfg.channels;
}

// total += Σ of a microbatch's per-token losses, in the kernels' memory.
void add_loss(const Activations& a, double* total) {
  const Tensor losses = a.losses;
  sum_into(
      "mpf::microbatch_loss", int64_t(losses.extent(0)),
      KOKKOS_LAMBDA(int64_t i) { return double(losses(i)); }, total);
}
}  // namespace

namespace {
int ranks_in(MPI_Comm comm) {
  int n = 1;
  MPI_Comm_size(comm, &n);
  return n;
}
}  // namespace

ModelStage::ModelStage(const TpShard& shard, const ParallelGroups& groups,
                       std::vector<ChunkPieces> chunks, int micro_batch, int seq_len,
                       bool sequence_parallel, bool recompute, pipeline::ChunkPlacement placement,
                       AttentionPath attention, bool backward)
    : shard_(shard),
      chunks_(std::move(chunks)),
      micro_batch_(micro_batch),
      seq_len_(seq_len),
      sequence_parallel_(sequence_parallel),
      groups_(groups.model()),
      tp_(groups.tp),
      cp_(groups.cp),
      attention_(attention),
      ring_(ranks_in(groups.cp) > 1
                ? std::make_unique<RingAttention>(
                      groups.cp, micro_batch, seq_len * ranks_in(groups.cp), shard.heads,
                      shard.kv_heads, shard.head_size, shard.cfg.sliding_window, attention)
                : nullptr),
      positions_(ring_ ? ring_->rows() : PositionRuns::contiguous(seq_len)),
      p2p_(groups.pp, int(chunks_.size()),
           message_floats(shard, micro_batch, seq_len, sequence_parallel), placement),
      buffers_(backward ? BackwardBuffers::allocate(shard, micro_batch, seq_len, sequence_parallel)
                        : BackwardBuffers{}),
      pool_(chunks_.size()),
      free_(chunks_.size()),
      weight_pool_(chunks_.size()),
      weight_free_(chunks_.size()) {
  if (shard.cfg.moe()) {
    expert_load_ =
        Slab("mpf::stage::expert_load", int64_t(shard.local_layers()) * shard.cfg.experts);
  }
  // A microbatch in flight keeps what its backward reads, not a copy of the one-op scratch.
  int64_t scratch = 0;
  for (ChunkPieces& c : chunks_) {
    c.recompute = c.recompute || recompute;
    c.shared_scratch = true;
    scratch = std::max(
        scratch, Activations::scratch_bytes(shard, c, micro_batch, seq_len, sequence_parallel));
  }
  scratch_ = Slab("mpf::stage::scratch", scratch / int64_t(sizeof(float)));
  if (!recompute) return;
  ChunkPieces one_block;
  one_block.layers = 1;
  one_block.embedding = one_block.head = false;
  one_block.bf16 = !chunks_.empty() && chunks_.front().bf16;
  one_block.tp_bf16 = !chunks_.empty() && chunks_.front().tp_bf16;
  workspace_ = allocate(one_block);
}

std::unique_ptr<Activations> ModelStage::allocate(const ChunkPieces& chunk) const {
  auto a = std::make_unique<Activations>(Activations::allocate(
      shard_, chunk, micro_batch_, seq_len_, sequence_parallel_, &positions_));
  a->ring = ring_.get();
  a->groups = groups_;
  a->attention = attention_;
  if (chunk.shared_scratch) a->bind_scratch(scratch_.data());
  return a;
}

void ModelStage::begin_step(const std::vector<Tokens>* inputs, const std::vector<Tokens>* targets,
                            const ParameterTensors* params, ParameterTensors* grads, float dloss,
                            PartDone part_done, const std::vector<Tokens>* doc_starts) {
  if (!live_.empty()) MPF_FATAL("a step began with microbatches still awaiting their backward");
  inputs_ = inputs;
  targets_ = targets;
  doc_starts_ = doc_starts;
  params_ = params;
  grads_ = grads;
  dloss_ = dloss;
  part_done_ = std::move(part_done);
  weights_done_.assign(chunks_.size(), 0);
  Kokkos::deep_copy(ExecSpace(), Kokkos::subview(loss_sums_, 0), 0.0);
  Kokkos::deep_copy(ExecSpace(), Kokkos::subview(loss_sums_, 2), 0.0);
  Kokkos::deep_copy(ExecSpace(), Kokkos::subview(loss_sums_, 3), 0.0);
  mtp_backwards_ = 0;
  if (expert_load_.extent(0) > 0) fill(expert_load_.data(), int64_t(expert_load_.extent(0)), 0.0f);
  if (qk_max_.extent(0) > 0) {
    fill(qk_max_.data(), int64_t(qk_max_.extent(0)), -std::numeric_limits<float>::infinity());
  }
  times_ = {};
}

void ModelStage::end_step() {
  if (!pending_grads_.empty()) MPF_FATAL("a step ended with input gradients never sent");
  p2p_.wait_for_sends();
}

void ModelStage::record(std::vector<StageEvent>* events, std::function<double()> clock) {
  events_ = events;
  clock_ = std::move(clock);
}

template <class Op>
void ModelStage::timed(const char* name, int mb, int chunk, Op op) {
  if (on_op_) on_op_(name, mb, chunk);
  rank_activity().schedule_op(p2p_.stage_of(chunk), mb, name);
  if (!events_) return op();
  const double start = clock_();
  op();
  Kokkos::fence();
  events_->push_back({name, mb, chunk, start, clock_()});
}

double ModelStage::loss_sum() const {
  return read_to_host(loss_sums_.data(), "d2h loss");
}

double ModelStage::aux_sum() const {
  return read_to_host(loss_sums_.data() + 2, "d2h balance loss");
}

double ModelStage::mtp_sum() const {
  return mtp_ ? read_to_host(loss_sums_.data() + 3, "d2h mtp loss") : 0.0;
}

void ModelStage::enable_mtp(float weight) {
  if (!shard_.has_head || shard_.cfg.mtp == 0) return;
  // The modules' sets run as the stage's chunks do: bf16 products and TP payloads alike.
  const bool bf16 = !chunks_.empty() && chunks_.front().bf16;
  const bool tp_bf16 = !chunks_.empty() && chunks_.front().tp_bf16;
  mtp_ = std::make_unique<MtpModules>(shard_, micro_batch_, seq_len_, weight, cp_, positions_,
                                      [&](const ChunkPieces& c) {
                                        ChunkPieces own = c;
                                        own.bf16 = bf16;
                                        own.tp_bf16 = tp_bf16;
                                        return allocate(own);
                                      });
}

void ModelStage::measure_qk_logits() {
  qk_max_ = Slab("mpf::stage::qk_max", int64_t(shard_.local_layers()) * shard_.heads);
  qk_rows_ = Slab("mpf::stage::qk_rows", int64_t(micro_batch_) * shard_.heads * seq_len_);
}

std::vector<float> ModelStage::qk_logit_max() const {
  std::vector<float> out(qk_max_.extent(0));
  copy_to_host(out.data(), qk_max_.data(), out.size() * sizeof(float), "d2h qk logit max");
  return out;
}

std::vector<float> ModelStage::expert_load() const {
  std::vector<float> out(expert_load_.extent(0));
  copy_to_host(out.data(), expert_load_.data(), out.size() * sizeof(float), "d2h expert load");
  return out;
}

int64_t ModelStage::microbatch_bytes() const {
  int64_t n = 0;
  for (const ChunkPieces& c : chunks_) {
    n += Activations::bytes(shard_, c, micro_batch_, seq_len_, sequence_parallel_);
  }
  return n;
}

void ModelStage::set_weight_with_input(bool on) {
  by_block_ = on;
  for (ChunkPieces& c : chunks_) {
    c.logit_rows = on ? head_chunk_rows(shard_, c, micro_batch_, seq_len_, sequence_parallel_) : 0;
  }
}

ChunkPieces ModelStage::weight_pieces(int chunk) const {
  ChunkPieces c = chunks_[size_t(chunk)];
  if (by_block_) {
    c.layers = std::min(c.layers, 2);
    c.recompute = false;  // W reads the workspace: no kept copies (gpt_backward_by_block)
  }
  return c;
}

int64_t ModelStage::weight_input_bytes() const {
  int64_t n = 0;
  for (int c = 0; c < int(chunks_.size()); ++c) {
    n += WeightGradInputs::bytes(shard_, weight_pieces(c), micro_batch_, seq_len_,
                                 sequence_parallel_);
  }
  return n;
}

Activations* ModelStage::acquire(int chunk) {
  if (free_[chunk].empty()) {
    pool_[chunk].push_back(allocate(chunks_[chunk]));
    free_[chunk].push_back(pool_[chunk].back().get());
  }
  Activations* a = free_[chunk].back();
  free_[chunk].pop_back();
  live_bytes_ += bytes_of(a->slab);
  peak_bytes_ = std::max(peak_bytes_, live_bytes_);
  peak_held_ = std::max(peak_held_, ++held_);
  return a;
}

void ModelStage::release(int chunk, Activations* a) {
  // The output's send completed at the start of the backward (backward_input).
  live_bytes_ -= bytes_of(a->slab);
  --held_;
  free_[chunk].push_back(a);
}

WeightGradInputs* ModelStage::acquire_weight_inputs(int chunk) {
  if (weight_free_[chunk].empty()) {
    weight_pool_[chunk].push_back(std::make_unique<WeightGradInputs>(WeightGradInputs::allocate(
        shard_, weight_pieces(chunk), micro_batch_, seq_len_, sequence_parallel_)));
    weight_free_[chunk].push_back(weight_pool_[chunk].back().get());
  }
  WeightGradInputs* w = weight_free_[chunk].back();
  weight_free_[chunk].pop_back();
  live_bytes_ += bytes_of(w->slab);
  peak_bytes_ = std::max(peak_bytes_, live_bytes_);
  return w;
}

Activations* ModelStage::live(int mb, int chunk) const {
  const auto it = live_.find({mb, chunk});
  if (it == live_.end()) {
    MPF_FATAL("microbatch " + std::to_string(mb) + ", chunk " + std::to_string(chunk) +
              ": no activations (the schedule ran its ops out of order)");
  }
  return it->second;
}

float* ModelStage::input_buffer(int mb, int chunk) {
  if (p2p_.is_first(chunk)) return nullptr;  // reads the tokens: nothing to receive
  Activations*& a = live_[{mb, chunk}];
  if (!a) a = acquire(chunk);
  return a->input.data();
}

float* ModelStage::grad_buffer(int mb, int chunk) {
  if (p2p_.is_last(chunk)) return nullptr;  // starts from the loss: nothing to receive
  // A pooled buffer from the receive's posting until its B has read it (the set keeps none).
  Activations* a = live(mb, chunk);
  if (!a->output_grad.data()) {
    const int64_t n = message_floats(shard_, micro_batch_, seq_len_, sequence_parallel_);
    if (received_free_.empty()) {
      received_pool_.emplace_back("mpf::pipeline::output_grad", n);
      received_free_.push_back(received_pool_.back().data());
    } else {
      Kokkos::fence();  // the B that read it last is done before MPI writes into it
    }
    a->output_grad = Tensor(received_free_.back(), n);
    received_free_.pop_back();
  }
  return a->output_grad.data();
}

Tensor ModelStage::take_grad_buffer() {
  const int64_t n = message_floats(shard_, micro_batch_, seq_len_, sequence_parallel_);
  for (const Slab& s : grad_pool_) {
    bool pending = false;
    for (const auto& [key, t] : pending_grads_) pending |= t.data() == s.data();
    if (!pending && !p2p_.in_flight(s.data())) return Tensor(s.data(), n);
  }
  grad_pool_.emplace_back("mpf::pipeline::input_grad", n);
  return Tensor(grad_pool_.back().data(), n);
}

const float* ModelStage::sent_grad(int mb, int chunk) {
  if (p2p_.is_first(chunk)) return nullptr;
  const auto it = pending_grads_.find({mb, chunk});
  if (it == pending_grads_.end()) {
    MPF_FATAL("send_backward of microbatch " + std::to_string(mb) + " before its backward");
  }
  const float* buf = it->second.data();
  pending_grads_.erase(it);
  return buf;
}

void ModelStage::check_lent_output_sent() const {
  if (unsent_.first < 0) return;
  MPF_FATAL("microbatch " + std::to_string(unsent_.first) + ", chunk " +
            std::to_string(unsent_.second) +
            ": a compute op before the send of its lent output (the schedule must send a "
            "forward's output right after it under --p2p-dtype bf16 with --recompute)");
}

void ModelStage::sent_output(int mb, int chunk) {
  if (unsent_ == Key{mb, chunk}) unsent_ = {-1, -1};
}

void ModelStage::forward(int mb, int chunk) {
  check_lent_output_sent();
  Activations*& a = live_[{mb, chunk}];
  if (!a) a = acquire(chunk);
  a->doc_start = doc_starts_ ? (*doc_starts_)[mb].data() : nullptr;
  a->moe_aux = loss_sums_.data() + 2;
  a->moe_load = expert_load_.data();
  a->qk_max = qk_max_.extent(0) > 0 ? qk_max_.data() : nullptr;
  a->qk_rows = Tensor(qk_rows_.data(), int64_t(qk_rows_.extent(0)));
  a->forward_dloss = dloss_;  // the head's classifier writes dlogits in the loss's pass
  Stopwatch sw;
  timed("F", mb, chunk, [&] {
    gpt_forward(*a, *params_, (*inputs_)[mb], (*targets_)[mb], tp_, workspace_.get());
    if (chunks_[chunk].head) add_loss(*a, loss_sums_.data());
    if (chunks_[chunk].head && mtp_) {
      mtp_->forward(*a, *params_, (*inputs_)[mb], (*targets_)[mb], tp_, loss_sums_.data() + 3,
                    a->moe_aux, a->moe_load);
    }
    if (time_ops_) Kokkos::fence();
  });
  times_.forward += sw.seconds() * 1e3;
  ++times_.forwards;
  if (chunks_[chunk].lent_output) unsent_ = {mb, chunk};
}

void ModelStage::backward_input(int mb, int chunk) {
  check_lent_output_sent();
  Activations* a = live(mb, chunk);
  // The output went to the next stage and its gradient has come back, so that send has been
  // received and completing it cannot block. Done before the backward because recomputation
  // rewrites the output (with the same values).
  if (!chunks_[chunk].head) p2p_.wait_for_send(a->output().data());
  WeightGradInputs* w = acquire_weight_inputs(chunk);
  awaiting_w_[{mb, chunk}] = w;
  Tensor input_grad;
  if (!chunks_[chunk].embedding) input_grad = take_grad_buffer();
  Stopwatch sw;
  timed("B", mb, chunk, [&] {
    if (chunks_[chunk].head && mtp_) backward_mtp(mb, *a);
    if (by_block_) {
      // W with B, block by block: the chunk's gradients are complete after its last
      // microbatch's B, as backward_weight says below.
      const bool chunk_done = ++weights_done_[chunk] == int(inputs_->size());
      gpt_backward_by_block(*grads_, buffers_, *w, *a, *params_, (*inputs_)[mb], (*targets_)[mb],
                            dloss_, tp_, input_grad, workspace_.get(),
                            chunk_done ? part_done_ : PartDone(), chunk_done);
    } else {
      gpt_backward_input(buffers_, *w, *a, *params_, (*targets_)[mb], dloss_, tp_, input_grad,
                         workspace_.get());
    }
    if (time_ops_) Kokkos::fence();
  });
  times_.backward += sw.seconds() * 1e3;
  ++times_.backwards;
  if (input_grad.data()) pending_grads_[{mb, chunk}] = input_grad;
  if (a->output_grad.data()) {  // read: back to the pool
    received_free_.push_back(a->output_grad.data());
    a->output_grad = Tensor();
  }
}

void ModelStage::backward_mtp(int mb, Activations& a) {
  // B and W at once: the modules' gradients are final after the step's last microbatch, when the
  // DP buckets hear of their blocks (before the head's: the shared head's share is in by then).
  const bool final = ++mtp_backwards_ == int(inputs_->size());
  mtp_->backward(a, *params_, *grads_, buffers_, (*inputs_)[mb], (*targets_)[mb], dloss_, tp_,
                 final);
  if (final && part_done_) {
    for (int k = 0; k < mtp_->depth(); ++k) {
      part_done_({ModelPart::Kind::kBlock, mtp_->first_block() + k});
    }
  }
}

void ModelStage::backward_weight(int mb, int chunk) {
  const auto it = awaiting_w_.find({mb, chunk});
  if (it == awaiting_w_.end()) {
    MPF_FATAL("microbatch " + std::to_string(mb) + ", chunk " + std::to_string(chunk) +
              ": W before its B (the schedule ran its ops out of order)");
  }
  WeightGradInputs* w = it->second;
  check_lent_output_sent();
  Activations* a = live(mb, chunk);
  // The chunk's gradients are complete after its last W; that is when sequence parallelism sums
  // its LayerNorm gradients over TP, and when the data-parallel buckets hear of each part it
  // finished, block by block, whichever chunk it is.
  Stopwatch sw;
  timed("W", mb, chunk, [&] {
    if (by_block_) return;  // done with B
    const bool chunk_done = ++weights_done_[chunk] == int(inputs_->size());
    gpt_backward_weight(*grads_, *w, *a, *params_, (*inputs_)[mb], tp_,
                        chunk_done ? part_done_ : PartDone(), chunk_done, workspace_.get());
    if (time_ops_) Kokkos::fence();
  });
  times_.weight += sw.seconds() * 1e3;
  ++times_.weights;
  awaiting_w_.erase(it);
  live_bytes_ -= bytes_of(w->slab);
  weight_free_[chunk].push_back(w);
  live_.erase({mb, chunk});
  release(chunk, a);
}

void ModelStage::recv_forward(int mb, int chunk) {
  if (p2p_.is_first(chunk)) return;
  timed(op_name(OpKind::kRecvForward), mb, chunk,
        [&] { p2p_.recv_forward(input_buffer(mb, chunk), mb, chunk); });
}

void ModelStage::send_forward(int mb, int chunk) {
  if (p2p_.is_last(chunk)) return;
  timed(op_name(OpKind::kSendForward), mb, chunk,
        [&] { p2p_.send_forward(live(mb, chunk)->output().data(), mb, chunk); });
  sent_output(mb, chunk);
}

void ModelStage::recv_backward(int mb, int chunk) {
  if (p2p_.is_last(chunk)) return;
  timed(op_name(OpKind::kRecvBackward), mb, chunk,
        [&] { p2p_.recv_backward(grad_buffer(mb, chunk), mb, chunk); });
}

void ModelStage::send_backward(int mb, int chunk) {
  if (p2p_.is_first(chunk)) return;
  timed(op_name(OpKind::kSendBackward), mb, chunk,
        [&] { p2p_.send_backward(sent_grad(mb, chunk), mb, chunk); });
}

void ModelStage::send_forward_recv_backward(int send_mb, int send_chunk, int recv_mb,
                                            int recv_chunk) {
  const float* out =
      p2p_.is_last(send_chunk) ? nullptr : live(send_mb, send_chunk)->output().data();
  float* grad = grad_buffer(recv_mb, recv_chunk);
  if (!out && !grad) return;
  timed(op_name(OpKind::kSendForwardRecvBackward), recv_mb, recv_chunk, [&] {
    p2p_.send_forward_recv_backward(out, send_mb, send_chunk, grad, recv_mb, recv_chunk);
  });
  if (out) sent_output(send_mb, send_chunk);
}

void ModelStage::send_backward_recv_forward(int send_mb, int send_chunk, int recv_mb,
                                            int recv_chunk) {
  const float* grad = sent_grad(send_mb, send_chunk);
  float* in = input_buffer(recv_mb, recv_chunk);
  if (!grad && !in) return;
  timed(op_name(OpKind::kSendBackwardRecvForward), recv_mb, recv_chunk, [&] {
    p2p_.send_backward_recv_forward(grad, send_mb, send_chunk, in, recv_mb, recv_chunk);
  });
}

void ModelStage::send_forward_recv_forward(int send_mb, int send_chunk, int recv_mb,
                                           int recv_chunk) {
  const float* out =
      p2p_.is_last(send_chunk) ? nullptr : live(send_mb, send_chunk)->output().data();
  float* in = input_buffer(recv_mb, recv_chunk);
  if (!out && !in) return;
  timed(op_name(OpKind::kSendForwardRecvForward), recv_mb, recv_chunk,
        [&] { p2p_.send_forward_recv_forward(out, send_mb, send_chunk, in, recv_mb, recv_chunk); });
  if (out) sent_output(send_mb, send_chunk);
}

void ModelStage::send_backward_recv_backward(int send_mb, int send_chunk, int recv_mb,
                                             int recv_chunk) {
  const float* grad = sent_grad(send_mb, send_chunk);
  float* out_grad = grad_buffer(recv_mb, recv_chunk);
  if (!grad && !out_grad) return;
  timed(op_name(OpKind::kSendBackwardRecvBackward), recv_mb, recv_chunk, [&] {
    p2p_.send_backward_recv_backward(grad, send_mb, send_chunk, out_grad, recv_mb, recv_chunk);
  });
}

void ModelStage::post_recv_forward(int mb, int chunk) {
  if (p2p_.is_first(chunk)) return;
  timed(op_name(OpKind::kPostRecvForward), mb, chunk,
        [&] { p2p_.post_recv_forward(input_buffer(mb, chunk), mb, chunk); });
}

void ModelStage::post_recv_backward(int mb, int chunk) {
  if (p2p_.is_last(chunk)) return;
  timed(op_name(OpKind::kPostRecvBackward), mb, chunk,
        [&] { p2p_.post_recv_backward(grad_buffer(mb, chunk), mb, chunk); });
}

double ModelStage::evaluate(const ParameterTensors& params, const std::vector<Tokens>& inputs,
                            const std::vector<Tokens>& targets,
                            const std::vector<Tokens>* doc_starts, const LossesSeen& losses) {
  // Forward only, microbatch by microbatch through the chunks in order. A microbatch's sets are
  // held until all its chunks are done: a send may be to this very rank (one stage, several
  // chunks), and MPI completes it only once the receive is posted.
  double* loss = loss_sums_.data() + 1;
  Kokkos::deep_copy(ExecSpace(), Kokkos::subview(loss_sums_, 1), 0.0);
  std::vector<Activations*> held(chunks_.size());
  for (size_t mb = 0; mb < inputs.size(); ++mb) {
    for (int c = 0; c < int(chunks_.size()); ++c) {
      Activations* a = held[c] = acquire(c);
      if (!p2p_.is_first(c)) p2p_.recv_forward(a->input.data(), int(mb), c);
      a->doc_start = doc_starts ? (*doc_starts)[mb].data() : nullptr;
      a->moe_aux = nullptr;     // an evaluation's balance losses are not the step's
      a->qk_max = nullptr;      // nor its logits
      a->forward_dloss = 0.0f;  // the losses only
      gpt_forward(*a, params, inputs[mb], targets[mb], tp_, workspace_.get());
      if (chunks_[c].head) add_loss(*a, loss);
      if (chunks_[c].head && losses) losses(int(mb), a->losses);
      if (!p2p_.is_last(c)) p2p_.send_forward(a->output().data(), int(mb), c);
    }
    p2p_.wait_for_sends();
    for (int c = 0; c < int(chunks_.size()); ++c) release(c, held[c]);
  }
  return read_to_host(loss, "d2h validation loss");
}

}  // namespace mpf
