// Being asked to stop: SIGUSR1 (Slurm's warning before a time limit, sbatch --signal), SIGTERM
// (scancel, a preemption) and SIGINT (Ctrl-C) ask the run to finish its current step, save (with
// --save) and exit with kExitSignalled. A thread only records the signal; the ranks agree on it
// at each step boundary, and between the batches of an evaluation (which then ends early, its
// partial result unreported), so one rank receiving it is enough. Signals within a few seconds of
// the first are the same request (scancel's TERM plus the job script's USR1); a signal after that
// is a second request and ends the process at once (the launcher then ends the whole job).
//
// A rank that cannot reach the end of its step is waiting on one that is gone: srun, ending a job
// whose rank died, sends the others SIGTERM and SIGKILLs them only after KillWait (30 s by
// default). So a stop signal that arrives during a training step also sets an alarm: a process
// that has not reached the step's end within the grace period exits then.
//
// SIGUSR2 is taken by the same thread but stops nothing: it asks the watchdog for its table of
// where each rank is (watchdog.hpp).
#pragma once

#include <mpi.h>

namespace mpf {

// Blocks the stop signals (and SIGALRM) in the calling thread and starts the thread that takes
// them with sigwait; no handler ever runs (stop_signals.cpp says why). Call it first in main,
// before any other thread exists: threads inherit the mask. A signal is delivered to a process,
// so what it records is the process's (the one piece of global state here).
void install_stop_signals();

// Collective over comm: the signal some rank received (the highest number if several), 0 if none.
// Then ends the step's grace: no alarm is pending until the next set_stop_grace.
int agree_on_stop(MPI_Comm comm);

// Starts a step's grace, in whole seconds: a stop signal received before (not yet acted on) or
// during the step must see agree_on_stop within it. Outside steps (start-up, validation, saving)
// there is none.
void set_stop_grace(int seconds);

// "SIGUSR1", "SIGTERM", "SIGINT", or "a stop signal".
const char* signal_name(int sig);

}  // namespace mpf
