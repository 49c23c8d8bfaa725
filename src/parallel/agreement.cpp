#include "parallel/agreement.hpp"

#include "parallel/grid.hpp"

namespace mpf {

std::string first_error(MPI_Comm comm, const std::string& mine) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  int me = mine.empty() ? size : rank, first = size;
  MPF_MPI_CHECK(MPI_Allreduce(&me, &first, 1, MPI_INT, MPI_MIN, comm));
  return first == size ? std::string() : broadcast(mine, first, comm);
}

}  // namespace mpf
