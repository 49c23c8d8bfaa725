// Where a rank runs: its place among the ranks of its node, from the MPI library itself
// (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED), never from a launcher's environment variables,
// so it holds under srun, mpiexec and any rank placement.
#pragma once

#include <mpi.h>

#include <vector>

namespace mpf {

struct NodePlacement {
  int local_rank = 0;  // this rank among the ranks of its node, in world order
  int local_size = 1;  // ranks on this node
};

// Collective over world.
NodePlacement node_placement(MPI_Comm world);

// Collective over comm: for each rank of comm, the lowest rank of comm on the same node (the
// ranks MPI_Comm_split_type SHARED puts together). For the tests, MPIFORMER_TEST_HOST names a
// rank's node instead (one machine posing as several, as checkpoint/local_shards.hpp reads it).
std::vector<int> node_of_ranks(MPI_Comm comm);

// --zero-group node (HSDP): a group split by node and, across the nodes, the ranks at the same
// place in it. Owns both communicators.
struct NodeSplit {
  // Collective over group; every node must hold the same number of its ranks (else `even` is
  // false and no communicator is made).
  explicit NodeSplit(MPI_Comm group);
  ~NodeSplit();
  NodeSplit(const NodeSplit&) = delete;
  NodeSplit& operator=(const NodeSplit&) = delete;
  MPI_Comm within = MPI_COMM_NULL;    // this rank's node's ranks of group, in group order
  MPI_Comm replicas = MPI_COMM_NULL;  // the ranks at this rank's place in each node, node order
  int nodes = 1;                      // nodes holding ranks of group
  bool even = true;                   // each of them holds the same number
};

// The CPUs this process may run on. With OpenMP binding on (OMP_PROC_BIND), the OpenMP run-time
// has already pinned the main thread to its first place before main() runs, so the thread's
// affinity shows one place: the CPUs of all the process's places are counted instead.
int usable_cpus();

}  // namespace mpf
