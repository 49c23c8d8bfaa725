#include "parallel/rank_activity.hpp"

#include <unistd.h>

#include <cstring>

namespace mpf {

namespace {

constexpr std::memory_order kRelaxed = std::memory_order_relaxed;

// Communicators and their names: written and read by the main thread alone (the grid makes its
// communicators there, and only the main thread calls MPI), so no lock.
struct NamedComm {
  MPI_Comm comm;
  const char* name;
};
NamedComm named[32];
int named_count = 0;

}  // namespace

thread_local bool RankActivity::is_writer_ = false;

void RankActivity::claim_writer() {
  is_writer_ = true;
}

RankActivity& rank_activity() {
  static RankActivity activity;
  return activity;
}

void name_communicator(MPI_Comm comm, const char* name) {
  if (comm == MPI_COMM_NULL) return;
  if (comm != MPI_COMM_WORLD) MPI_Comm_set_name(comm, name);
  for (int i = 0; i < named_count; ++i) {
    if (named[i].comm == comm) {
      named[i].name = name;
      return;
    }
  }
  if (named_count < int(sizeof named / sizeof named[0])) named[named_count++] = {comm, name};
}

void forget_communicator(MPI_Comm comm) {
  for (int i = 0; i < named_count; ++i) {
    if (named[i].comm == comm) named[i] = named[--named_count];
  }
}

const char* communicator_name(MPI_Comm comm) {
  for (int i = 0; i < named_count; ++i) {
    if (named[i].comm == comm) return named[i].name;
  }
  return "a communicator";
}

void RankActivity::phase(int step, const char* phase) {
  if (!writer()) return;
  begin_write();
  step_.store(step, kRelaxed);
  phase_.store(phase, kRelaxed);
  op_.store(nullptr, kRelaxed);
  end_write();
}

void RankActivity::schedule_op(int stage, int mb, const char* op) {
  if (!writer()) return;
  begin_write();
  stage_.store(stage, kRelaxed);
  mb_.store(mb, kRelaxed);
  op_.store(op, kRelaxed);
  end_write();
}

void RankActivity::enter_mpi(const char* call, MPI_Comm comm, int peer, int tag) {
  if (!writer()) return;
  begin_write();
  call_.store(call, kRelaxed);
  comm_.store(communicator_name(comm), kRelaxed);
  peer_.store(peer, kRelaxed);
  tag_.store(tag, kRelaxed);
  end_write();
  if (hang_call_ && step_.load(kRelaxed) == hang_step_ && std::strcmp(call, hang_call_) == 0) {
    stall();
  }
}

void RankActivity::leave_mpi() {
  if (!writer()) return;
  begin_write();
  call_.store(nullptr, kRelaxed);
  end_write();
}

ActivitySnapshot RankActivity::read() const {
  ActivitySnapshot s;
  // A write is a few stores long; a writer preempted mid-write is waited for a while, then its
  // record is taken as it is.
  for (int tries = 0;; ++tries) {
    const uint64_t before = seq_.load(std::memory_order_acquire);
    if ((before & 1) && tries < 1000000) continue;
    s.seq = before;
    s.step = step_.load(kRelaxed);
    s.phase = phase_.load(kRelaxed);
    s.stage = stage_.load(kRelaxed);
    s.mb = mb_.load(kRelaxed);
    s.op = op_.load(kRelaxed);
    s.call = call_.load(kRelaxed);
    s.comm = comm_.load(kRelaxed);
    s.peer = peer_.load(kRelaxed);
    s.tag = tag_.load(kRelaxed);
    s.stalled = stalled_.load(kRelaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (seq_.load(kRelaxed) == before || tries >= 1000000) return s;
  }
}

void RankActivity::arm_test_hang(int step, const char* call) {
  hang_step_ = step;
  hang_call_ = call;
}

void RankActivity::stall() {
  begin_write();
  stalled_.store(true, kRelaxed);
  end_write();
  for (;;) sleep(60);  // the other threads (the watchdog's) go on
}

}  // namespace mpf
