// How mpiformer-train ends, as its exit status on every rank, so a job script can tell a run to
// requeue (3) from one to look at.
#pragma once

namespace mpf {

enum ExitStatus : int {
  kExitDone = 0,
  kExitFault = 1,       // an internal fault (MPI_Abort)
  kExitBadInput = 2,    // flags, data, a checkpoint or a layout: nothing trained
  kExitSignalled = 3,   // SIGUSR1/SIGTERM/SIGINT: stopped after a step, saved when --save is set
  kExitDiverged = 4,    // a non-finite loss or gradient norm: that step's update was not applied
  kExitWatchdog = 5,    // a step ran longer than --step-timeout: the job was aborted
  kExitSaveFailed = 6,  // a checkpoint could not be written; the previous one is intact
};

}  // namespace mpf
