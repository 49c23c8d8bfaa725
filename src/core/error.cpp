#include "core/error.hpp"

#include <unistd.h>

#include <cstdio>

namespace mpf {

bool any_rank_failed(MPI_Comm comm, const std::string& local_error) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  // The lowest failing rank speaks, so a failure seen by all ranks prints once, from rank 0.
  int mine = local_error.empty() ? size : rank, first = size;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
  if (first == size) return false;
  if (rank == first) {
    std::fprintf(stderr, "error: %s\n", local_error.c_str());
    std::fflush(stderr);
  }
  return true;
}

void fatal(const char* file, int line, const std::string& message) {
  // MPI_COMM_SELF: library code never names the world (docs/design.md, invariant 4). MPICH's
  // launcher ends the whole job when one process aborts, so ranks blocked in a collective do not
  // hang.
  int initialized = 0;
  MPI_Initialized(&initialized);
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  std::fprintf(stderr, "fatal [%s pid %d] %s:%d: %s\n", host, int(getpid()), file, line,
               message.c_str());
  std::fflush(stderr);
  if (initialized) MPI_Abort(MPI_COMM_SELF, 1);
  std::abort();
}

}  // namespace mpf
