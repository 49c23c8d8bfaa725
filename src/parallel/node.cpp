#include "parallel/node.hpp"

#include <sched.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

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

std::vector<int> node_of_ranks(MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  MPI_Comm node;
  MPF_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
  // The node's lowest rank of comm names it, unless the tests name it.
  int leader = rank;
  MPF_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, node));
  MPI_Comm_free(&node);
  constexpr int kSlot = 256;
  char mine[kSlot] = {};
  if (const char* fake = std::getenv("MPIFORMER_TEST_HOST"); fake && *fake) {
    std::snprintf(mine, sizeof mine, "host %s", fake);
  } else {
    std::snprintf(mine, sizeof mine, "rank %d", leader);
  }
  std::vector<char> all(size_t(size) * kSlot, '\0');
  MPF_MPI_CHECK(MPI_Allgather(mine, kSlot, MPI_CHAR, all.data(), kSlot, MPI_CHAR, comm));
  std::map<std::string, int> first;
  std::vector<int> out(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    out[size_t(r)] = first.emplace(std::string(&all[size_t(r) * kSlot]), r).first->second;
  }
  return out;
}

NodeSplit::NodeSplit(MPI_Comm group) {
  int rank = 0;
  MPI_Comm_rank(group, &rank);
  const std::vector<int> node_of = node_of_ranks(group);
  std::map<int, int> ranks_on;  // node -> its ranks of group
  for (int n : node_of) ++ranks_on[n];
  nodes = int(ranks_on.size());
  for (const auto& [n, count] : ranks_on) even = even && count == ranks_on.begin()->second;
  if (!even) return;
  const int node = node_of[size_t(rank)];
  int place = 0, node_index = 0;  // this rank among its node's; its node among the nodes
  for (int r = 0; r < rank; ++r) place += node_of[size_t(r)] == node;
  for (const auto& [n, count] : ranks_on) node_index += n < node;
  MPF_MPI_CHECK(MPI_Comm_split(group, node, rank, &within));
  MPF_MPI_CHECK(MPI_Comm_split(group, place, node_index, &replicas));
}

NodeSplit::~NodeSplit() {
  if (within != MPI_COMM_NULL) MPI_Comm_free(&within);
  if (replicas != MPI_COMM_NULL) MPI_Comm_free(&replicas);
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
