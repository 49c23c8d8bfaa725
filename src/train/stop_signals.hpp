// Being asked to stop: SIGUSR1 (Slurm's warning before a time limit, sbatch --signal), SIGTERM
// (scancel, a preemption) and SIGINT (Ctrl-C) ask the run to finish its current step, save (with
// --save) and exit with kExitSignalled. The handler only records the signal; the ranks agree on it
// at each step boundary, so one rank receiving it is enough. A second signal to a process ends it
// at once (the launcher then ends the whole job).
#pragma once

#include <mpi.h>

namespace mpf {

// Installs the handlers. A signal is delivered to a process, so what it records is the process's
// (the one piece of global state here, as a signal handler needs).
void install_stop_signals();

// Collective over comm: the signal some rank received (the highest number if several), 0 if none.
int agree_on_stop(MPI_Comm comm);

// "SIGUSR1", "SIGTERM", "SIGINT", or "signal N".
const char* signal_name(int sig);

}  // namespace mpf
