// AFAB, all forward then all backward (GPipe, Huang et al. 2019; Picotron's
// train_step_pipeline_afab): every microbatch's forward, then every backward in the same order
// (FIFO). The easiest schedule to follow and to debug, but all M activations are alive at once on
// every rank. The last forward's output goes out while the first gradient comes in, paired as
// every forward followed at once by a backward is (both halves posted before either waits).
// Bubble: (P − 1)/(M + P − 1).
#include "pipeline/schedule.hpp"

namespace mpf::pipeline {

void run_afab(StageOps& ops, const PipelineShape& shape) {
  validate(shape, Schedule::kAfab);
  const int M = shape.microbatches;
  constexpr int chunk = 0;  // one chunk per rank

  // All forward
  for (int mb = 0; mb < M; ++mb) {
    ops.recv_forward(mb, chunk);
    ops.forward(mb, chunk);
    if (mb < M - 1) ops.send_forward(mb, chunk);
  }

  // All backward, oldest microbatch first
  for (int mb = 0; mb < M; ++mb) {
    if (mb == 0) {
      ops.send_forward_recv_backward(M - 1, chunk, 0, chunk);
    } else {
      ops.recv_backward(mb, chunk);
    }
    ops.backward_input(mb, chunk);
    ops.backward_weight(mb, chunk);
    ops.send_backward(mb, chunk);
  }
}

}  // namespace mpf::pipeline
