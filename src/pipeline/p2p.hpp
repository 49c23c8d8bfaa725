// Pipeline point-to-point (Megatron's P2PCommunicator, Picotron's pp_communications): a stage
// sends its output activations forward to the next virtual stage and receives their gradients
// back from it. The verbs are the standard six; each posts its MPI_Isend/MPI_Irecv (a pair posted
// together) and waits for them with MPI_Waitall, so a send buffer is free again when the verb
// returns. The first virtual stage has nothing to receive forward or send backward, the last
// nothing to send forward or receive backward: those halves are no-ops inside the verbs.
//
// With V model chunks per rank (interleaved), virtual stage s = chunk·P + rank; its successor
// s + 1 is on rank (rank + 1) mod P, so the stages form a ring. A message's tag is built from
// (microbatch, receiving virtual stage, direction), so a receive matches exactly its send.
// MPIFORMER_TRACE_PP=1 prints `verb | rank -> peer | mb, chunk` to stderr for every message.
#pragma once

#include <mpi.h>

#include <cstdint>

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

  bool is_first(int chunk) const { return chunk == 0 && rank_ == 0; }
  bool is_last(int chunk) const { return chunk == chunks_ - 1 && rank_ == stages_ - 1; }

 private:
  enum Direction { kForward = 0, kBackward = 1 };
  int tag(int mb, int receiving_stage, Direction d) const;
  void post_send(const float* buf, int mb, int chunk, Direction d, MPI_Request* req,
                 const char* verb);
  void post_recv(float* buf, int mb, int chunk, Direction d, MPI_Request* req, const char* verb);
  void wait(MPI_Request* reqs, int n);

  MPI_Comm pp_;
  int rank_ = 0, stages_ = 1, chunks_ = 1;
  int count_ = 0;
  int tag_ub_ = 32767;
  bool trace_ = false;
};

}  // namespace mpf
