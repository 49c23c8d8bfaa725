// Pipeline point-to-point (Megatron's P2PCommunicator, Picotron's pp_communications): a stage
// sends its output activations forward to the next virtual stage and receives their gradients
// back from it. The verbs are the standard six; each posts its MPI_Isend/MPI_Irecv (a pair posted
// together) and returns once its receives are complete. Sends stay in flight: a send that waited
// for its receiver would close a cycle in the interleaved schedule's ring of stages (rank P−1
// feeds rank 0) as soon as MPI switches to rendezvous for large messages. The caller keeps a sent
// buffer untouched until wait_for_sends(), at the latest when the step ends. The first virtual
// stage has nothing to receive forward or send backward, the last nothing to send forward or
// receive backward: those halves are no-ops inside the verbs.
//
// With V model chunks per rank (interleaved), virtual stage s = chunk·P + rank; its successor
// s + 1 is on rank (rank + 1) mod P, so the stages form a ring. A message's tag is built from
// (microbatch, receiving virtual stage, direction), so a receive matches exactly its send.
// MPIFORMER_TRACE_PP=1 prints `verb | rank -> peer | mb, chunk` to stderr for every message.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

namespace mpf {

class PipelineP2P {
 public:
  // pp: the pipeline communicator; chunks: V; count: floats in one message (a microbatch's
  // activation, (B,T,C) or its sequence-parallel rows).
  PipelineP2P(MPI_Comm pp, int chunks, int64_t count);

  void recv_forward(float* input, int mb, int chunk);
  void send_forward(const float* output, int mb, int chunk);
  void recv_backward(float* output_grad, int mb, int chunk);
  void send_backward(const float* input_grad, int mb, int chunk);
  // Paired: send this stage's output of (send_mb, send_chunk) forward while receiving the
  // gradient of (recv_mb, recv_chunk)'s output from the next stage, and vice versa.
  void send_forward_recv_backward(const float* output, int send_mb, int send_chunk,
                                  float* output_grad, int recv_mb, int recv_chunk);
  void send_backward_recv_forward(const float* input_grad, int send_mb, int send_chunk,
                                  float* input, int recv_mb, int recv_chunk);

  // Completes every send still in flight; their buffers may be reused afterwards.
  void wait_for_sends();
  // Completes the sends of `buf` still in flight. Call it only when their receives are known to
  // be posted (e.g. the reply to that message has arrived), or it may wait for the receiver.
  void wait_for_send(const float* buf);
  // Whether a send of `buf` is still in flight (tests, never waits).
  bool in_flight(const float* buf);
  ~PipelineP2P() { wait_for_sends(); }
  PipelineP2P(const PipelineP2P&) = delete;
  PipelineP2P& operator=(const PipelineP2P&) = delete;

  // The most microbatches per step whose tags fit under this MPI's MPI_TAG_UB.
  int64_t max_microbatches() const {
    return (int64_t(tag_ub_) + 1) / (2 * int64_t(stages_) * chunks_);
  }

  bool is_first(int chunk) const { return chunk == 0 && rank_ == 0; }
  bool is_last(int chunk) const { return chunk == chunks_ - 1 && rank_ == stages_ - 1; }

 private:
  enum Direction { kForward = 0, kBackward = 1 };
  int tag(int mb, int receiving_stage, Direction d) const;
  void post_send(const float* buf, int mb, int chunk, Direction d, MPI_Request* req,
                 const char* verb);
  void post_recv(float* buf, int mb, int chunk, Direction d, MPI_Request* req, const char* verb);
  void wait(MPI_Request* reqs, int n);
  void send(const float* buf, int mb, int chunk, Direction d, const char* verb);
  // Posts a receive and waits for it.
  void receive(float* buf, int mb, int chunk, Direction d, const char* verb);
  // Drops the sends whose requests MPI has completed.
  void forget_completed_sends();

  MPI_Comm pp_;
  int rank_ = 0, stages_ = 1, chunks_ = 1;
  int count_ = 0;
  int tag_ub_ = 32767;
  bool trace_ = false;
  struct Send {
    MPI_Request request;
    const float* buf;
  };
  std::vector<Send> sends_;  // in flight
};

}  // namespace mpf
