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
// With V model chunks per rank, a chunk's virtual stage and its neighbours' ranks follow the
// chunk placement (placement.hpp): looped (interleaved), virtual stage s = chunk·P + rank, whose
// successor s + 1 is on rank (rank + 1) mod P, so the stages form a ring; or in a V, where the
// neighbours are the ranks next to this one, or this rank itself at the V's turn. A message's tag
// is built from (microbatch, receiving virtual stage, direction), so a receive matches exactly its
// send. A receive may be posted ahead (post_recv_*) and completed by the verb that needs it.
//
// Buffers are in the kernels' memory. A send first waits for the kernels that wrote it. With an
// MPI that cannot read GPU memory (parallel/device_mpi.hpp, staged()), each message goes through
// a page-locked host buffer of a pool that grows to the most messages ever in flight and is then
// reused: a send copies into one before MPI_Isend, a receive copies out of its one once complete.
//
// With set_bf16 (--p2p-dtype bf16) a message travels as bf16, as Megatron's under bf16 training:
// a send rounds its fp32 buffer (to nearest, ties to even) into a bf16 wire buffer of a pool and
// sends that, and a receive arrives into one and widens it into its fp32 buffer once complete.
// Half the bytes on the link and in the staged host copies; the wire pool grows, as the host
// pool does, to the most messages ever in flight. The sender's fp32 buffer is free again as soon
// as the send is posted. The values received are the sent ones rounded, so this changes results
// against --pp 1 (the residual stream is fp32 here): opt-in.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "core/bf16.hpp"
#include "core/types.hpp"
#include "pipeline/placement.hpp"

namespace mpf {

// The MPI_TAG_UB of comm (the standard's least, 32767, if the library does not say).
int tag_upper_bound(MPI_Comm comm);
// The most microbatches per step whose tags, (microbatch, receiving virtual stage, direction),
// fit under `tag_ub` on `stages` ranks of `chunks` model chunks each; a layout is checked
// against it before anything is allocated.
inline int64_t pipeline_max_microbatches(int tag_ub, int stages, int chunks) {
  return (int64_t(tag_ub) + 1) / (2 * int64_t(stages) * chunks);
}

class PipelineP2P {
 public:
  // pp: the pipeline communicator; chunks: V; count: floats in one message (a microbatch's
  // activation, (B,T,C) or its sequence-parallel rows); placement: where the chunks run.
  PipelineP2P(MPI_Comm pp, int chunks, int64_t count,
              pipeline::ChunkPlacement placement = pipeline::ChunkPlacement::kLooped);

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
  // Megatron's same-direction pairs.
  void send_forward_recv_forward(const float* output, int send_mb, int send_chunk, float* input,
                                 int recv_mb, int recv_chunk);
  void send_backward_recv_backward(const float* input_grad, int send_mb, int send_chunk,
                                   float* output_grad, int recv_mb, int recv_chunk);
  // Post a receive now; the verb receiving (mb, chunk) later only waits for it. The buffer must
  // be the one that verb would receive into.
  void post_recv_forward(float* input, int mb, int chunk);
  void post_recv_backward(float* output_grad, int mb, int chunk);

  // Completes every send still in flight; their buffers may be reused afterwards.
  void wait_for_sends();
  // Completes the sends of `buf` still in flight. Call it only when their receives are known to
  // be posted (e.g. the reply to that message has arrived), or it may wait for the receiver.
  void wait_for_send(const float* buf);
  // Whether a send of `buf` is still in flight (tests, never waits).
  bool in_flight(const float* buf);
  ~PipelineP2P() { wait_for_sends(); }
  // Messages as bf16 from now on (see the top). Before the first message.
  void set_bf16(bool on) { bf16_ = on; }
  bool bf16_messages() const { return bf16_; }
  PipelineP2P(const PipelineP2P&) = delete;
  PipelineP2P& operator=(const PipelineP2P&) = delete;

  int stage_of(int chunk) const {
    return pipeline::virtual_stage(placement_, stages_, rank_, chunk);
  }
  bool is_first(int chunk) const { return stage_of(chunk) == 0; }
  bool is_last(int chunk) const { return stage_of(chunk) == stages_ * chunks_ - 1; }

 private:
  enum Direction { kForward = 0, kBackward = 1 };
  // A receive in flight: into `buf`, through host buffer `host` (-1 when not staged) and, with
  // bf16 messages, wire buffer `wire` (else -1).
  struct Recv {
    MPI_Request request = MPI_REQUEST_NULL;
    float* buf = nullptr;
    int host = -1;
    int wire = -1;
  };
  int tag(int mb, int receiving_stage, Direction d) const;
  Recv post_recv(float* buf, int mb, int chunk, Direction d);
  // Waits for r and, staged, copies its message into place.
  void complete(Recv& r);
  void send(const float* buf, int mb, int chunk, Direction d);
  // Staged: a free host buffer of the pool (grown when none is free), now taken.
  int take_host_buffer();
  // bf16 messages: a free wire buffer of the pool (grown when none is free), now taken.
  int take_wire_buffer();
  // A message's bytes: count_ floats, or count_ bf16 values.
  size_t message_bytes() const { return size_t(count_) * (bf16_ ? sizeof(bf16) : sizeof(float)); }
  // Waits for the receive of (mb, chunk, d), posting it first unless it was posted ahead.
  void receive(float* buf, int mb, int chunk, Direction d);
  // The rank running virtual stage s.
  int rank_of(int s) const { return pipeline::chunk_site(placement_, stages_, s).rank; }
  // Drops the sends whose requests MPI has completed.
  void forget_completed_sends();

  MPI_Comm pp_;
  pipeline::ChunkPlacement placement_;
  int rank_ = 0, stages_ = 1, chunks_ = 1;
  int count_ = 0;
  int tag_ub_ = 32767;
  bool staged_ = false;
  bool bf16_ = false;
  struct Send {
    MPI_Request request;
    const float* buf;  // null with bf16 messages: the wire buffer holds what is sent
    int host;          // its host buffer (staged), else -1
    int wire;          // its wire buffer (bf16 messages), else -1
  };
  std::vector<Send> sends_;                                      // in flight
  std::map<std::tuple<int, int, int>, Recv> posted_;             // receives posted ahead
  std::vector<Kokkos::View<float*, PinnedSpace>> host_buffers_;  // staged: the pool
  std::vector<bool> host_busy_;
  std::vector<Bf16Slab> wire_buffers_;  // bf16 messages: the pool
  std::vector<bool> wire_busy_;
};

}  // namespace mpf
