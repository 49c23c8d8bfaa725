// 1F1B (PipeDream-Flush, Narayanan et al. 2021; Picotron's train_step_pipeline_1f1b). Same bubble
// as AFAB, (P − 1)/(M + P − 1), but a rank holds at most P − rank activations instead of M:
//   Warmup:   warmup = min(P − rank − 1, M) forwards fill the pipeline below this rank.
//   Steady:   M − warmup times, one forward then one backward; the forward's output goes out
//             while the backward's output gradient comes in (send_forward_recv_backward), and
//             the backward's input gradient goes out while the next forward's input comes in
//             (send_backward_recv_forward).
//   Cooldown: the last `warmup` backwards drain the pipeline. Without a steady phase (M <= warmup)
//             the last forward's output still goes out paired with the first gradient, as in
//             the steady state.
// Microbatches start and finish in order: forward i in the steady state is warmup + i,
// backward i is i.
#include "pipeline/schedule.hpp"

namespace mpf::pipeline {

void run_warmup_steady_cooldown(StageOps& ops, int M, int warmup) {
  const int steady = M - warmup;
  constexpr int chunk = 0;  // one chunk per rank

  // Warmup
  for (int mb = 0; mb < warmup; ++mb) {
    ops.recv_forward(mb, chunk);
    ops.forward(mb, chunk);
    if (mb < M - 1) ops.send_forward(mb, chunk);  // the last forward's, paired below
  }

  // Steady
  if (steady > 0) ops.recv_forward(warmup, chunk);
  for (int i = 0; i < steady; ++i) {
    const int fwd_mb = warmup + i, bwd_mb = i;
    ops.forward(fwd_mb, chunk);
    ops.send_forward_recv_backward(fwd_mb, chunk, bwd_mb, chunk);
    ops.backward_input(bwd_mb, chunk);
    ops.backward_weight(bwd_mb, chunk);
    if (i == steady - 1) {
      ops.send_backward(bwd_mb, chunk);  // no forward left to receive
    } else {
      ops.send_backward_recv_forward(bwd_mb, chunk, fwd_mb + 1, chunk);
    }
  }

  // Cooldown
  for (int mb = steady; mb < M; ++mb) {
    if (mb == 0) {  // no steady phase
      ops.send_forward_recv_backward(M - 1, chunk, 0, chunk);
    } else {
      ops.recv_backward(mb, chunk);
    }
    ops.backward_input(mb, chunk);
    ops.backward_weight(mb, chunk);
    ops.send_backward(mb, chunk);
  }
}

void run_one_f_one_b(StageOps& ops, const PipelineShape& shape) {
  validate(shape, Schedule::kOneFOneB);
  run_warmup_steady_cooldown(ops, shape.microbatches, one_f_one_b_warmup(shape));
}

}  // namespace mpf::pipeline
