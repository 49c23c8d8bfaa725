// Where this rank is: the run's phase and step, the pipeline schedule's op (virtual stage,
// microbatch, F/B/W or a P2P verb) and the MPI call it is in (communicator, peer, tag), kept in
// one small record per process so the watchdog (train/watchdog.hpp) can say, when a rank hangs,
// where every rank was (docs/checkpoints.md, "Faults end the job, never hang it").
//
// Left on always, so it costs what a few plain stores cost: one thread writes (the main thread,
// which makes the step's MPI calls; calls from any other thread, such as a background save's
// writer, are not recorded), another reads (the watchdog's), through a seqlock whose fields are
// relaxed atomics: no lock, no allocation, no clock read, no system call on the writer's side.
// Names are string literals, kept as pointers. The reader times how long a record has stood by
// noticing when its sequence number last moved.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>

namespace mpf {

// A consistent copy of the record. The pointers are string literals, or null when unset.
struct ActivitySnapshot {
  uint64_t seq = 0;  // moves on every change
  int step = 0;
  const char* phase = nullptr;  // "pipeline schedule", "data-parallel gradient all-reduce", ...
  int stage = -1, mb = -1;      // the schedule's op: virtual stage and microbatch
  const char* op = nullptr;     // "F", "B", "W" or a P2P verb; null outside the schedule's ops
  const char* call = nullptr;   // "MPI_Irecv", "MPI_Allreduce", ...; null outside MPI
  const char* comm = nullptr;   // the communicator's name (name_communicator)
  int peer = -1, tag = -1;      // a P2P call's peer (a rank of comm) and tag
  bool stalled = false;         // stopped here by MPIFORMER_TEST_HANG
};

class RankActivity {
 public:
  // Makes the calling thread the one whose phases, ops and MPI calls are recorded; the others'
  // calls below do nothing (a seqlock has one writer).
  void claim_writer();

  // The run's phase (a string literal) in step `step`; forgets the schedule's op.
  void phase(int step, const char* phase);
  // A schedule op starting: `op` on microbatch `mb` of virtual stage `stage`.
  void schedule_op(int stage, int mb, const char* op);
  // Entering MPI call `call` (a literal) on `comm`; peer and tag for a P2P call, else -1.
  void enter_mpi(const char* call, MPI_Comm comm, int peer = -1, int tag = -1);
  void leave_mpi();

  ActivitySnapshot read() const;

  // For tests: the first enter_mpi of `call` in step `step` never returns, as if that call hung
  // on this rank (the record says so). `call` must outlive the process.
  void arm_test_hang(int step, const char* call);

 private:
  static bool writer() { return is_writer_; }
  void begin_write() {
    const uint64_t s = seq_.load(std::memory_order_relaxed);
    seq_.store(s + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
  }
  void end_write() {
    seq_.store(seq_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }
  [[noreturn]] void stall();

  std::atomic<uint64_t> seq_{0};  // odd while a write is under way
  std::atomic<int> step_{0}, stage_{-1}, mb_{-1}, peer_{-1}, tag_{-1};
  std::atomic<const char*> phase_{nullptr}, op_{nullptr}, call_{nullptr}, comm_{nullptr};
  std::atomic<bool> stalled_{false};
  static thread_local bool is_writer_;
  // The writer's alone: the test hang.
  int hang_step_ = 0;
  const char* hang_call_ = nullptr;
};

// The process's record.
RankActivity& rank_activity();

// Names `comm` for the records (and for MPI tools, MPI_Comm_set_name); `name` a string literal.
// The grid names its communicators when it makes them; up to 32 are kept.
void name_communicator(MPI_Comm comm, const char* name);
// Before MPI_Comm_free: MPI may give its handle to another communicator.
void forget_communicator(MPI_Comm comm);
// The name given, or "a communicator" for one never named.
const char* communicator_name(MPI_Comm comm);

// An MPI call for a scope: entered on construction, left on destruction.
class MpiCallScope {
 public:
  MpiCallScope(const char* call, MPI_Comm comm, int peer = -1, int tag = -1) {
    rank_activity().enter_mpi(call, comm, peer, tag);
  }
  ~MpiCallScope() { rank_activity().leave_mpi(); }
  MpiCallScope(const MpiCallScope&) = delete;
  MpiCallScope& operator=(const MpiCallScope&) = delete;
};

}  // namespace mpf
