#include "pipeline/model_stage.hpp"

#include "core/error.hpp"
#include "core/parallel.hpp"
#include "model/gpt.hpp"

namespace mpf {

ModelStage::ModelStage(const TpShard& shard, int micro_batch, int seq_len, bool sequence_parallel,
                       MPI_Comm tp)
    : shard_(shard),
      micro_batch_(micro_batch),
      seq_len_(seq_len),
      sequence_parallel_(sequence_parallel),
      tp_(tp),
      buffers_(BackwardBuffers::allocate(shard, micro_batch, seq_len, sequence_parallel)) {}

void ModelStage::begin_step(const std::vector<Tokens>* inputs, const std::vector<Tokens>* targets,
                            const ParameterTensors* params, ParameterTensors* grads, float dloss,
                            std::function<void(int)> grads_final) {
  if (!live_.empty()) MPF_FATAL("a step began with microbatches still awaiting their backward");
  inputs_ = inputs;
  targets_ = targets;
  params_ = params;
  grads_ = grads;
  dloss_ = dloss;
  grads_final_ = std::move(grads_final);
  backwards_done_ = 0;
  loss_sum_ = 0.0;
}

Activations* ModelStage::acquire() {
  if (free_.empty()) {
    pool_.push_back(std::make_unique<Activations>(
        Activations::allocate(shard_, micro_batch_, seq_len_, sequence_parallel_)));
    free_.push_back(pool_.back().get());
  }
  Activations* a = free_.back();
  free_.pop_back();
  live_bytes_ += bytes_of(a->slab);
  peak_bytes_ = std::max(peak_bytes_, live_bytes_);
  return a;
}

void ModelStage::release(Activations* a) {
  live_bytes_ -= bytes_of(a->slab);
  free_.push_back(a);
}

void ModelStage::forward(int mb, int chunk) {
  Activations* a = acquire();
  live_[mb] = a;
  gpt_forward(*a, *params_, (*inputs_)[mb], (*targets_)[mb], tp_);
  const Tensor losses = a->losses;
  loss_sum_ += sum(
      "mpf::microbatch_loss", int64_t(losses.extent(0)),
      KOKKOS_LAMBDA(int64_t i) { return double(losses(i)); });
}

double ModelStage::evaluate(const ParameterTensors& params, const Tokens& inputs,
                            const Tokens& targets) {
  Activations* a = acquire();
  gpt_forward(*a, params, inputs, targets, tp_);
  const Tensor losses = a->losses;
  const double loss = sum(
      "mpf::evaluate_loss", int64_t(losses.extent(0)),
      KOKKOS_LAMBDA(int64_t i) { return double(losses(i)); });
  release(a);
  return loss;
}

void ModelStage::backward_input(int mb, int chunk) {
  const auto it = live_.find(mb);
  if (it == live_.end())
    MPF_FATAL("backward of microbatch " + std::to_string(mb) + " before its forward");
  // Gradients are final, for the data-parallel buckets, only after the last microbatch.
  const bool last = ++backwards_done_ == int(inputs_->size());
  gpt_backward(*grads_, buffers_, *it->second, *params_, (*inputs_)[mb], (*targets_)[mb], dloss_,
               tp_, last ? grads_final_ : std::function<void(int)>(), last);
  release(it->second);
  live_.erase(it);
}

}  // namespace mpf
