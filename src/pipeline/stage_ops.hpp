// What a pipeline schedule may do on its rank: three compute calls and Megatron-LM's P2P verbs.
// The trainer implements it with tensors and MPI, the simulator (simulator.hpp) by recording
// events under a cost model, OpRecorder (stage_program.hpp) by recording the calls; all run the
// same schedule loops (schedule.hpp) and the same executor of schedule tables.
//
// Naming. A rank owns V model chunks; (rank, chunk) is one virtual stage, placed as
// placement.hpp says (looped: virtual stage chunk·P + rank; or in a V). Virtual stages run layers
// in order: forward activations flow to the next virtual stage, their gradients to the previous
// one, wherever those run (another rank, or this one). Every call names the microbatch and the
// LOCAL chunk it concerns: recv_forward(mb, c) receives the input of this rank's chunk c,
// send_forward(mb, c) sends the output of this rank's chunk c.
//
// Rules every implementation keeps, so that schedules can call the verbs uniformly:
// - Edges are no-ops inside the verb: nothing is received forward by virtual stage 0 (it reads the
//   tokens) or backward by the last one (it owns the loss); nothing is sent past either end.
// - Tags carry (microbatch, chunk, direction), with chunk = the receiver's chunk, so a message can
//   only match the receive it was meant for whatever order the peers run in.
// - A paired verb posts its send and its receive together before waiting: neighbours exchanging
//   at the same moment cannot block each other.
// - A verb returns once its receives are complete; its sends may still be in flight, their
//   buffers untouched until the requests complete (later, e.g. at the next verb). The
//   interleaved schedule needs this: its chunks form a ring (rank P − 1 feeds rank 0), and sends
//   that wait for their receiver (MPI's rendezvous protocol, used for large messages) close a
//   cycle of waits around it. The simulator's rendezvous mode shows the deadlock; AFAB, 1F1B and
//   the zero-bubble tables run either way. A message to the rank's own next chunk (a V's turn)
//   never waits for its receive.
// - post_recv_* posts a receive ahead of the verb that completes it (recv_*, or a paired verb's
//   receive half), without waiting: the tables' way (stage_program.hpp) to let a neighbour's
//   send complete while this rank still computes.
// - A microbatch's activations are released once its W is done; what W reads is kept from B on.
// - Per (mb, chunk): forward before backward_input before backward_weight; each exactly once.
#pragma once

namespace mpf::pipeline {

// The direction of a P2P message: activations go forward, their gradients backward.
enum class Direction { kForward, kBackward };

class StageOps {
 public:
  virtual ~StageOps() = default;

  // ---- compute ----
  // Runs chunk `chunk` on microbatch `mb`; its input was received (or is the tokens).
  virtual void forward(int mb, int chunk) = 0;
  // B: the gradient of the chunk's input, from its output's gradient (or the loss).
  virtual void backward_input(int mb, int chunk) = 0;
  // W: the chunk's parameter gradients (+=), after its B.
  virtual void backward_weight(int mb, int chunk) = 0;

  // ---- P2P: single direction ----
  virtual void recv_forward(int mb, int chunk) = 0;   // input of (mb, chunk) from previous stage
  virtual void send_forward(int mb, int chunk) = 0;   // output of (mb, chunk) to next stage
  virtual void recv_backward(int mb, int chunk) = 0;  // output gradient of (mb, chunk) from next
  virtual void send_backward(int mb, int chunk) = 0;  // input gradient of (mb, chunk) to previous

  // ---- P2P: pairs, posted together then waited (the 1F1B steady state) ----
  // Sends the output of (send_mb, send_chunk) forward while receiving the output gradient of
  // (recv_mb, recv_chunk), the next backward's input.
  virtual void send_forward_recv_backward(int send_mb, int send_chunk, int recv_mb,
                                          int recv_chunk) = 0;
  // Sends the input gradient of (send_mb, send_chunk) backward while receiving the input of
  // (recv_mb, recv_chunk), the next forward's.
  virtual void send_backward_recv_forward(int send_mb, int send_chunk, int recv_mb,
                                          int recv_chunk) = 0;
  // Megatron's two same-direction pairs (a V's chunks exchange both ways with one neighbour).
  virtual void send_forward_recv_forward(int send_mb, int send_chunk, int recv_mb,
                                         int recv_chunk) = 0;
  virtual void send_backward_recv_backward(int send_mb, int send_chunk, int recv_mb,
                                           int recv_chunk) = 0;

  // ---- P2P: a receive posted ahead, completed by a later verb ----
  virtual void post_recv_forward(int mb, int chunk) = 0;
  virtual void post_recv_backward(int mb, int chunk) = 0;
};

}  // namespace mpf::pipeline
