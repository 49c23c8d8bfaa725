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
  // 1F1B's loop with every microbatch in its warmup: no steady phase, then the cooldown runs every
  // backward in order, the first paired with the last forward's send.
  run_warmup_steady_cooldown(ops, shape.microbatches, /*warmup=*/shape.microbatches);
}

}  // namespace mpf::pipeline
