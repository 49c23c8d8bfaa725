// --step-timeout: a thread on every rank that ends the job when a step (or a save, or a
// validation) runs longer than the limit, so a stuck rank or a hung collective cannot burn the
// allocation. It prints one line naming the rank, the step and the phase this rank was in, then
// exits the process with kExitWatchdog; the launcher (mpiexec, srun --kill-on-bad-exit) ends the
// other ranks. The other ranks' watchdogs fire too when they wait on a stopped one.
//
// It observes the run's phases (step_phases.hpp); each is a few atomic stores.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "train/step_phases.hpp"

namespace mpf {

class Watchdog : public PhaseObserver {
 public:
  // timeout_seconds <= 0: no thread, every call does nothing.
  Watchdog(double timeout_seconds, int world_rank);
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

  double timeout_;
  int rank_;
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

}  // namespace mpf
