#include "train/step_rerun.hpp"

#include <unistd.h>

#include <Kokkos_Core.hpp>
#include <cstring>
#include <vector>

#include "core/error.hpp"
#include "core/types.hpp"

namespace mpf {

uint64_t bits_checksum(const float* x, int64_t n) {
  uint64_t sum = 0;
  Kokkos::parallel_reduce(
      "mpf::bits_checksum", Kokkos::RangePolicy<ExecSpace>(0, n),
      KOKKOS_LAMBDA(int64_t i, uint64_t & acc) {
        union {
          float f;
          uint32_t u;
        } bits;
        bits.f = x[i];
        // Odd weights (a Weyl sequence): a value moved to another index changes the sum too.
        acc += (uint64_t(bits.u) + 1) * ((uint64_t(i) * 0x9E3779B97F4A7C15ull) | 1);
      },
      sum);
  return sum;
}

std::string rerun_verdict(MPI_Comm world, uint64_t first, uint64_t second, int step) {
  int size = 1, rank = 0;
  MPI_Comm_size(world, &size);
  MPI_Comm_rank(world, &rank);
  char host[64] = {};
  gethostname(host, sizeof host - 1);
  const int mine = first != second ? 1 : 0;
  std::vector<int> changed(size);
  std::vector<char> hosts(size_t(size) * sizeof host);
  MPF_MPI_CHECK(MPI_Allgather(&mine, 1, MPI_INT, changed.data(), 1, MPI_INT, world));
  MPF_MPI_CHECK(
      MPI_Allgather(host, sizeof host, MPI_CHAR, hosts.data(), sizeof host, MPI_CHAR, world));
  std::string named;
  for (int r = 0; r < size; ++r) {
    if (!changed[r]) continue;
    named += (named.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r) + " on " +
             std::string(&hosts[size_t(r) * sizeof host]);
  }
  if (named.empty()) return "";
  return "step " + std::to_string(step) +
         ": computed again from the same state, the gradients of " + named +
         " came out different (the training is bit-reproducible, so that hardware gave two "
         "answers to one question): stopped; resume from the newest checkpoint without that "
         "node, and have it checked";
}

}  // namespace mpf
