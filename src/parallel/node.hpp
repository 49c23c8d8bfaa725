// Where a rank runs: its place among the ranks of its node, from the MPI library itself
// (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED), never from a launcher's environment variables,
// so it holds under srun, mpiexec and any rank placement.
#pragma once

#include <mpi.h>

namespace mpf {

struct NodePlacement {
  int local_rank = 0;  // this rank among the ranks of its node, in world order
  int local_size = 1;  // ranks on this node
};

// Collective over world.
NodePlacement node_placement(MPI_Comm world);

// The CPUs this process may run on. With OpenMP binding on (OMP_PROC_BIND), the OpenMP run-time
// has already pinned the main thread to its first place before main() runs, so the thread's
// affinity shows one place: the CPUs of all the process's places are counted instead.
int usable_cpus();

}  // namespace mpf
