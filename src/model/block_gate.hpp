// The model's one hook for sharded blocks (ZeRO-2 and ZeRO-3, optim/sharded_blocks.hpp): the
// forward and backward tell the ParameterTensors' gate before they read a block's parameters or
// write its gradients, and after each W of a block. The gate may then point the block's views
// (ParameterTensors::blocks) elsewhere, which the model reads at call time.
#pragma once

namespace mpf {

class BlockGate {
 public:
  enum class Use { kForward, kBackward, kWeight };
  virtual ~BlockGate() = default;
  // Local block `block` is about to be used; `next`, the block the same pass uses after it (-1:
  // none), may be fetched meanwhile.
  virtual void enter(int block, Use use, int next) = 0;
  // The W of `block` for one microbatch is done: its gradients may leave.
  virtual void weight_done(int block) = 0;
  // Whether a block's gradients leave after every microbatch's W: sums over TP the model does
  // once a step (final_microbatch) are then done at each W.
  virtual bool grads_per_microbatch() const = 0;
};

}  // namespace mpf
