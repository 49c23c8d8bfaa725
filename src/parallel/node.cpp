#include "parallel/node.hpp"

#include <sched.h>

#include "core/error.hpp"
#ifdef _OPENMP
#include <omp.h>
#endif

namespace mpf {

NodePlacement node_placement(MPI_Comm world) {
  MPI_Comm node;
  int world_rank = 0;
  MPI_Comm_rank(world, &world_rank);
  MPF_MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node));
  NodePlacement p;
  MPI_Comm_rank(node, &p.local_rank);
  MPI_Comm_size(node, &p.local_size);
  MPI_Comm_free(&node);
  return p;
}

int usable_cpus() {
#ifdef _OPENMP
  if (omp_get_proc_bind() != omp_proc_bind_false && omp_get_num_places() > 0) {
    int cpus = 0;
    for (int p = 0; p < omp_get_num_places(); ++p) cpus += omp_get_place_num_procs(p);
    return cpus;
  }
#endif
  cpu_set_t set;
  return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
}

}  // namespace mpf
