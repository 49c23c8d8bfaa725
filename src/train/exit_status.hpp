// How mpiformer-train (and mpiformer-eval) ends, as its exit status on every rank, so a job
// script can tell a run to requeue (3) from one to look at.
#pragma once

namespace mpf {

enum ExitStatus : int {
  kExitDone = 0,
  kExitFault = 1,       // an internal fault (MPI_Abort)
  kExitBadInput = 2,    // flags, data, a checkpoint or a layout: nothing trained
  kExitSignalled = 3,   // a stop signal: stopped after a step, saved if --save; eval: no score
  kExitDiverged = 4,    // a non-finite loss or gradient norm: that step's update was not applied
  kExitWatchdog = 5,    // a step ran longer than --step-timeout: the job was aborted
  kExitSaveFailed = 6,  // a checkpoint could not be written; the previous one is intact
  kExitSuspect = 7,     // --rerun-suspect: a step computed again gave a rank other gradients
};

// A second stop signal, or a step that did not end within its grace after the first
// (stop_signals.hpp), exits at once with 128 + the signal's number, as a shell reports a process
// a signal ended: 130 SIGINT, 138 SIGUSR1, 143 SIGTERM on Linux. Nothing is saved.
constexpr int exit_status_killed_by(int signal) {
  return 128 + signal;
}

}  // namespace mpf
