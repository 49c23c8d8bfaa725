#include "pipeline/p2p.hpp"

#include <algorithm>
#include <climits>
#include <string>

#include "core/error.hpp"
#include "core/transfer.hpp"
#include "parallel/device_mpi.hpp"
#include "parallel/rank_activity.hpp"

namespace mpf {

int tag_upper_bound(MPI_Comm comm) {
  int* ub = nullptr;
  int found = 0;
  MPI_Comm_get_attr(comm, MPI_TAG_UB, &ub, &found);
  return found && ub ? *ub : 32767;
}

PipelineP2P::PipelineP2P(MPI_Comm pp, int chunks, int64_t count, pipeline::ChunkPlacement placement)
    : pp_(pp), placement_(placement), chunks_(chunks) {
  MPI_Comm_rank(pp, &rank_);
  MPI_Comm_size(pp, &stages_);
  require(count <= INT_MAX,
          "a pipeline message of over 2^31 floats is not supported; use a "
          "smaller micro-batch");
  count_ = static_cast<int>(count);
  tag_ub_ = tag_upper_bound(pp);
  staged_ = staged();
}

int PipelineP2P::tag(int mb, int receiving_stage, Direction d) const {
  const int64_t t = (int64_t(mb) * stages_ * chunks_ + receiving_stage) * 2 + d;
  if (t > tag_ub_) {
    MPF_FATAL("pipeline tag " + std::to_string(t) + " exceeds MPI_TAG_UB " +
              std::to_string(tag_ub_) + ": too many microbatches for this MPI");
  }
  return static_cast<int>(t);
}

int PipelineP2P::take_host_buffer() {
  for (size_t i = 0; i < host_busy_.size(); ++i) {
    if (!host_busy_[i]) {
      host_busy_[i] = true;
      return int(i);
    }
  }
  host_buffers_.emplace_back(Kokkos::view_alloc(Kokkos::WithoutInitializing, "mpf::pipeline::host"),
                             (message_bytes() + sizeof(float) - 1) / sizeof(float));
  host_busy_.push_back(true);
  return int(host_buffers_.size()) - 1;
}

int PipelineP2P::take_wire_buffer() {
  for (size_t i = 0; i < wire_busy_.size(); ++i) {
    if (!wire_busy_[i]) {
      wire_busy_[i] = true;
      return int(i);
    }
  }
  wire_buffers_.emplace_back(Kokkos::view_alloc(Kokkos::WithoutInitializing, "mpf::pipeline::wire"),
                             count_);
  wire_busy_.push_back(true);
  return int(wire_buffers_.size()) - 1;
}

void PipelineP2P::send(const float* buf, int mb, int chunk, Direction d) {
  const int stage = stage_of(chunk);
  const int to_stage = d == kForward ? stage + 1 : stage - 1;
  const int peer = rank_of(to_stage);
  Send s{MPI_REQUEST_NULL, buf, -1, -1};
  const void* data = buf;
  if (bf16_) {
    // The wire buffer holds the message from here on: buf is free once this returns. Sends
    // completed since the last look give their wire buffers back first, so the pool stays at the
    // most in flight.
    for (Send& sent : sends_) {
      int done = 0;
      MPF_MPI_CHECK(MPI_Test(&sent.request, &done, MPI_STATUS_IGNORE));
    }
    forget_completed_sends();
    s.wire = take_wire_buffer();
    round_to_bf16(wire_buffers_[s.wire].data(), buf, count_);
    data = wire_buffers_[s.wire].data();
    s.buf = nullptr;
  }
  if (staged_) {
    s.host = take_host_buffer();
    void* host = host_buffers_[s.host].data();
    copy_to_host(host, data, message_bytes(), "d2h pipeline (staged)");
    data = host;
  } else {
    Kokkos::fence();  // the kernels that wrote the message are done before MPI reads it
  }
  const int t = tag(mb, to_stage, d);
  MpiCallScope in_mpi("MPI_Isend", pp_, peer, t);
  MPF_MPI_CHECK(
      MPI_Isend(data, count_, bf16_ ? MPI_UINT16_T : MPI_FLOAT, peer, t, pp_, &s.request));
  sends_.push_back(s);
}

PipelineP2P::Recv PipelineP2P::post_recv(float* buf, int mb, int chunk, Direction d) {
  const int stage = stage_of(chunk);
  const int peer = rank_of(d == kForward ? stage - 1 : stage + 1);
  Recv r{MPI_REQUEST_NULL, buf, staged_ ? take_host_buffer() : -1, bf16_ ? take_wire_buffer() : -1};
  void* data = r.host >= 0   ? static_cast<void*>(host_buffers_[r.host].data())
               : r.wire >= 0 ? static_cast<void*>(wire_buffers_[r.wire].data())
                             : static_cast<void*>(buf);
  if (r.wire >= 0 && r.host < 0) Kokkos::fence();  // a widening that read it last is done
  MPF_MPI_CHECK(MPI_Irecv(data, count_, bf16_ ? MPI_UINT16_T : MPI_FLOAT, peer, tag(mb, stage, d),
                          pp_, &r.request));
  return r;
}

void PipelineP2P::complete(Recv& r) {
  MPF_MPI_CHECK(MPI_Wait(&r.request, MPI_STATUS_IGNORE));
  if (r.host >= 0) {
    void* to =
        r.wire >= 0 ? static_cast<void*>(wire_buffers_[r.wire].data()) : static_cast<void*>(r.buf);
    copy_from_host(to, host_buffers_[r.host].data(), message_bytes(), "h2d pipeline (staged)");
    host_busy_[r.host] = false;
  }
  if (r.wire >= 0) {
    widen_from_bf16(r.buf, wire_buffers_[r.wire].data(), count_);
    wire_busy_[r.wire] = false;
  }
}

void PipelineP2P::receive(float* buf, int mb, int chunk, Direction d) {
  // Where a rank waits for its neighbour: the receive's peer and tag, for a hang's record.
  const int stage = stage_of(chunk);
  MpiCallScope in_mpi("MPI_Irecv", pp_, rank_of(d == kForward ? stage - 1 : stage + 1),
                      tag(mb, stage, d));
  const auto ahead = posted_.find({mb, chunk, d});
  if (ahead != posted_.end()) {
    Recv r = ahead->second;
    posted_.erase(ahead);
    if (r.buf != buf) MPF_FATAL("a receive posted ahead into another buffer than its verb's");
    complete(r);
  } else {
    Recv r = post_recv(buf, mb, chunk, d);
    complete(r);
  }
}

void PipelineP2P::forget_completed_sends() {
  auto done = [this](const Send& s) {
    if (s.request != MPI_REQUEST_NULL) return false;
    if (s.host >= 0) host_busy_[s.host] = false;
    if (s.wire >= 0) wire_busy_[s.wire] = false;
    return true;
  };
  sends_.erase(std::remove_if(sends_.begin(), sends_.end(), done), sends_.end());
}

void PipelineP2P::wait_for_sends() {
  if (sends_.empty()) return;
  MpiCallScope in_mpi("MPI_Wait (the sends in flight)", pp_);
  for (Send& s : sends_) MPF_MPI_CHECK(MPI_Wait(&s.request, MPI_STATUS_IGNORE));
  forget_completed_sends();
}

void PipelineP2P::wait_for_send(const float* buf) {
  MpiCallScope in_mpi("MPI_Wait (a send in flight)", pp_);
  for (Send& s : sends_) {
    if (s.buf == buf) MPF_MPI_CHECK(MPI_Wait(&s.request, MPI_STATUS_IGNORE));
  }
  forget_completed_sends();
}

bool PipelineP2P::in_flight(const float* buf) {
  bool busy = false;
  for (Send& s : sends_) {
    int done = 0;
    MPF_MPI_CHECK(MPI_Test(&s.request, &done, MPI_STATUS_IGNORE));
    if (!done && s.buf == buf) busy = true;
  }
  forget_completed_sends();
  return busy;
}

void PipelineP2P::recv_forward(float* input, int mb, int chunk) {
  if (is_first(chunk)) return;
  receive(input, mb, chunk, kForward);
}

void PipelineP2P::send_forward(const float* output, int mb, int chunk) {
  if (!is_last(chunk)) send(output, mb, chunk, kForward);
}

void PipelineP2P::recv_backward(float* output_grad, int mb, int chunk) {
  if (is_last(chunk)) return;
  receive(output_grad, mb, chunk, kBackward);
}

void PipelineP2P::send_backward(const float* input_grad, int mb, int chunk) {
  if (!is_first(chunk)) send(input_grad, mb, chunk, kBackward);
}

void PipelineP2P::post_recv_forward(float* input, int mb, int chunk) {
  if (is_first(chunk)) return;
  posted_[{mb, chunk, kForward}] = post_recv(input, mb, chunk, kForward);
}

void PipelineP2P::post_recv_backward(float* output_grad, int mb, int chunk) {
  if (is_last(chunk)) return;
  posted_[{mb, chunk, kBackward}] = post_recv(output_grad, mb, chunk, kBackward);
}

void PipelineP2P::send_forward_recv_backward(const float* output, int send_mb, int send_chunk,
                                             float* output_grad, int recv_mb, int recv_chunk) {
  // The send is posted before the receive is waited on, so two neighbours doing the mirror pair
  // cannot deadlock, whatever MPI does with large messages.
  if (!is_last(send_chunk)) send(output, send_mb, send_chunk, kForward);
  if (!is_last(recv_chunk)) {
    receive(output_grad, recv_mb, recv_chunk, kBackward);
  }
}

void PipelineP2P::send_backward_recv_forward(const float* input_grad, int send_mb, int send_chunk,
                                             float* input, int recv_mb, int recv_chunk) {
  if (!is_first(send_chunk)) {
    send(input_grad, send_mb, send_chunk, kBackward);
  }
  if (!is_first(recv_chunk)) {
    receive(input, recv_mb, recv_chunk, kForward);
  }
}

void PipelineP2P::send_forward_recv_forward(const float* output, int send_mb, int send_chunk,
                                            float* input, int recv_mb, int recv_chunk) {
  if (!is_last(send_chunk)) send(output, send_mb, send_chunk, kForward);
  if (!is_first(recv_chunk)) {
    receive(input, recv_mb, recv_chunk, kForward);
  }
}

void PipelineP2P::send_backward_recv_backward(const float* input_grad, int send_mb, int send_chunk,
                                              float* output_grad, int recv_mb, int recv_chunk) {
  if (!is_first(send_chunk)) {
    send(input_grad, send_mb, send_chunk, kBackward);
  }
  if (!is_last(recv_chunk)) {
    receive(output_grad, recv_mb, recv_chunk, kBackward);
  }
}

}  // namespace mpf
