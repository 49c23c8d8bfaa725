// The model behind the schedule interface (pipeline::StageOps) with real tensors: what the
// schedule loops drive in the trainer. Today the whole model is one stage (--pp 1), so a schedule
// is gradient accumulation over M microbatches and the P2P verbs have no peer; the pipeline
// runtime will give each stage its layer range and send through PipelineP2P.
//
// Activations are pooled: forward takes a set (allocating only while the pool is smaller than
// the most microbatches ever in flight), backward returns it, and the peak in-flight bytes are
// counted (AFAB holds M microbatches, 1F1B on one stage one).
#pragma once

#include <mpi.h>

#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "model/activations.hpp"
#include "model/parameters.hpp"
#include "pipeline/stage_ops.hpp"

namespace mpf {

class ModelStage : public pipeline::StageOps {
 public:
  ModelStage(const TpShard& shard, int micro_batch, int seq_len, bool sequence_parallel,
             MPI_Comm tp);

  // What the next step runs on: the microbatches' tokens, the parameters and their gradients,
  // dloss (d total loss / d each token's loss), and the hook told when gradients are final (after
  // the last microbatch's backward only; may be empty).
  void begin_step(const std::vector<Tokens>* inputs, const std::vector<Tokens>* targets,
                  const ParameterTensors* params, ParameterTensors* grads, float dloss,
                  std::function<void(int)> grads_final);
  // Validation: a forward pass alone, outside any step; returns the sum of the per-token losses.
  double evaluate(const ParameterTensors& params, const Tokens& inputs, const Tokens& targets);
  // Σ of the per-token losses of the microbatches forwarded since begin_step.
  double loss_sum() const { return loss_sum_; }
  int64_t peak_activation_bytes() const { return peak_bytes_; }
  int64_t buffer_bytes() const { return bytes_of(buffers_.slab); }

  void forward(int mb, int chunk) override;
  void backward_input(int mb, int chunk) override;
  void backward_weight(int mb, int chunk) override {}  // W runs inside B, block by block
  // One stage: no peer in either direction.
  void recv_forward(int, int) override {}
  void send_forward(int, int) override {}
  void recv_backward(int, int) override {}
  void send_backward(int, int) override {}
  void send_forward_recv_backward(int, int, int, int) override {}
  void send_backward_recv_forward(int, int, int, int) override {}

 private:
  Activations* acquire();
  void release(Activations* a);

  TpShard shard_;
  int micro_batch_, seq_len_;
  bool sequence_parallel_;
  MPI_Comm tp_;
  BackwardBuffers buffers_;
  std::vector<std::unique_ptr<Activations>> pool_;
  std::vector<Activations*> free_;
  std::map<int, Activations*> live_;  // microbatch -> its activations, forward done
  int64_t live_bytes_ = 0, peak_bytes_ = 0;
  const std::vector<Tokens>* inputs_ = nullptr;
  const std::vector<Tokens>* targets_ = nullptr;
  const ParameterTensors* params_ = nullptr;
  ParameterTensors* grads_ = nullptr;
  float dloss_ = 0.0f;
  std::function<void(int)> grads_final_;
  int backwards_done_ = 0;
  double loss_sum_ = 0.0;
};

}  // namespace mpf
