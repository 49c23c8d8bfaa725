#include "parallel/node.hpp"

#include "core/error.hpp"

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

}  // namespace mpf
