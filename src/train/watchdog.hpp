// --step-timeout: a thread on every rank that ends the job when a step (or a save, or a
// validation) runs longer than the limit, so a stuck rank or a hung collective cannot burn the
// allocation. It prints one line naming the rank, the step and the phase this rank was in, then
// exits the process with kExitWatchdog; the launcher (mpiexec, srun --kill-on-bad-exit) ends the
// other ranks. The other ranks' watchdogs fire too when they wait on a stopped one.
//
// Rank 0 then prints a table, a line per rank, of where each rank was: its step, its pipeline op
// (stage, microbatch, F/B/W) and the MPI call it was in (communicator, peer, tag), and for how
// long (parallel/rank_activity.hpp records them). SIGUSR2 prints the same table at any time and
// the run goes on. The ranks' records reach rank 0 through a small file per rank, which each
// rank's watchdog thread rewrites in place 20 times a --step-timeout, at most once a second,
// changed or not (when it was written tells rank 0 the process still runs), in the run's
// directory: --save DIR's `ranks/`, else a directory rank 0 makes in $TMPDIR (a shared file
// system only with --save).
// Files, not an MPI one-sided window: a hang is MPI's, and the files need nothing from MPI or
// from the other ranks being alive (a stopped or dead rank's last record is still read), no
// thread but the watchdog's touches them, and they stay behind for a post-mortem.
//
// It observes the run's phases (step_phases.hpp); each is a few atomic stores.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "train/step_phases.hpp"

namespace mpf {

class Watchdog : public PhaseObserver {
 public:
  // timeout_seconds <= 0: never fires; its thread still keeps this rank's record file and prints
  // the table on SIGUSR2. record_dir: where the ranks' record files are ("": none; made here).
  Watchdog(double timeout_seconds, int world_rank, int world_size, std::string record_dir);
  ~Watchdog() override;
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // A step, and each piece of work at its boundary (validation, a sample, a save), is timed on
  // its own; the phases within one say where in it this rank is; leaving the training stops it.
  void entered(StepPhase phase, int step, double min_seconds) override;
  void left(StepPhase phase) override;
  void op(const char* name, int mb, int chunk) override { this->phase(name, mb, chunk); }

 private:
  // A new timed unit of work restarts the clock: what ("step", "save", "validation") and its
  // step number; `limit` seconds instead of the timeout when larger. `what` and every phase name
  // must be string literals.
  void begin(const char* what, int step, double limit = 0.0);
  // Where in it this rank is; mb and chunk when the phase is a pipeline op.
  void phase(const char* name, int mb = -1, int chunk = -1);
  // Stops timing (the run is done, or waits on nothing).
  void stop();
  void watch();
  // This rank's record as the watchdog thread last saw it: its line, whether in an MPI call,
  // since when (wall clock).
  struct Seen {
    std::string line;
    bool in_mpi = false;
    double since = 0;
  };
  // Rewrites this rank's record file, as checked at `checked` (wall clock).
  void write_record(const Seen& own, double checked);
  // Rank `rank`'s line, from its record file, at wall-clock time `now`.
  std::string read_record(int rank, double now) const;
  // Rank 0: the table of every rank's last record, to stderr in one write.
  void print_table(const char* why, const Seen& own) const;
  // Past the limit: the fatal line, rank 0's table, then the process ends.
  void fire_if_over(const Seen& own) const;

  double timeout_;
  int rank_, ranks_;
  std::string record_dir_;
  double period_;  // how often the record file is rewritten, and the limit checked at least
  int record_fd_ = -1;
  char host_[256] = "?";
  std::atomic<bool> armed_{false};
  std::atomic<int64_t> started_ns_{0};
  std::atomic<double> limit_{0.0};
  std::atomic<const char*> what_{"step"}, phase_{"start"};
  std::atomic<int> step_{0}, mb_{-1}, chunk_{-1};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool quit_ = false;
  std::thread thread_;
};

// SIGUSR2's request for the table of where each rank is (stop_signals.cpp's signal thread): the
// watchdog thread prints it at its next wake.
void ask_for_rank_table();

// The directory of the ranks' record files for a run saving to `save_dir` ("": none): its
// `ranks/`, else a new directory in $TMPDIR (or /tmp) on rank 0; "" if it cannot be made.
// Collective over world.
std::string rank_record_dir(const std::string& save_dir, int world_rank, MPI_Comm world);

}  // namespace mpf
