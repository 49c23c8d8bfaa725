// Interleaved 1F1B (Megatron's virtual pipeline, Narayanan et al. 2021). Each rank owns V chunks
// of the model; a microbatch visits rank 0 .. P − 1 once per chunk. The phases are 1F1B's over
// M·V micro-steps, micro-step k being (interleaved_microbatch(k), interleaved_forward_chunk(k))
// forward and the same microbatch with interleaved_backward_chunk(k) backward (schedule.hpp,
// which also explains the order when M is not a multiple of P):
//   Warmup:   warmup = min(2(P − rank − 1) + (V − 1)·G, M·V) forwards, G = P + (M mod P).
//   Steady:   M·V − warmup times, forward step warmup + i then backward step i, with 1F1B's
//             paired sends and receives.
//   Cooldown: the remaining backward steps. Without a steady phase the last forward's output
//             goes out paired with the first gradient (as 1F1B's loop does).
// Bubble: (P − 1)/(V·M + P − 1), the 1F1B bubble divided by about V. Sends must not wait for
// their receiver (stage_ops.hpp): the chunks form a ring over the ranks.
#include "pipeline/schedule.hpp"

namespace mpf::pipeline {

void run_interleaved(StageOps& ops, const PipelineShape& shape) {
  validate(shape, Schedule::kInterleaved);
  const int steps = shape.microbatches * shape.virtual_stages;
  const int warmup = interleaved_warmup(shape);
  const int steady = steps - warmup;
  auto mb = [&](int k) { return interleaved_microbatch(shape, k); };
  auto fwd_chunk = [&](int k) { return interleaved_forward_chunk(shape, k); };
  auto bwd_chunk = [&](int k) { return interleaved_backward_chunk(shape, k); };

  // Warmup
  for (int k = 0; k < warmup; ++k) {
    ops.recv_forward(mb(k), fwd_chunk(k));
    ops.forward(mb(k), fwd_chunk(k));
    if (k < steps - 1) ops.send_forward(mb(k), fwd_chunk(k));  // the last forward's, paired below
  }

  // Steady
  if (steady > 0) ops.recv_forward(mb(warmup), fwd_chunk(warmup));
  for (int i = 0; i < steady; ++i) {
    const int f = warmup + i, b = i;  // forward and backward micro-steps
    ops.forward(mb(f), fwd_chunk(f));
    ops.send_forward_recv_backward(mb(f), fwd_chunk(f), mb(b), bwd_chunk(b));
    ops.backward_input(mb(b), bwd_chunk(b));
    ops.backward_weight(mb(b), bwd_chunk(b));
    if (i == steady - 1) {
      ops.send_backward(mb(b), bwd_chunk(b));  // no forward left to receive
    } else {
      ops.send_backward_recv_forward(mb(b), bwd_chunk(b), mb(f + 1), fwd_chunk(f + 1));
    }
  }

  // Cooldown
  for (int b = steady; b < steps; ++b) {
    if (b == 0) {  // no steady phase
      ops.send_forward_recv_backward(mb(steps - 1), fwd_chunk(steps - 1), mb(0), bwd_chunk(0));
    } else {
      ops.recv_backward(mb(b), bwd_chunk(b));
    }
    ops.backward_input(mb(b), bwd_chunk(b));
    ops.backward_weight(mb(b), bwd_chunk(b));
    ops.send_backward(mb(b), bwd_chunk(b));
  }
}

}  // namespace mpf::pipeline
