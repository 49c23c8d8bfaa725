#include "train/step_rerun.hpp"

#include <Kokkos_Core.hpp>
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

std::vector<int> ranks_whose_bits_changed(MPI_Comm world, uint64_t first, uint64_t second) {
  int size = 1;
  MPI_Comm_size(world, &size);
  const int mine = first != second ? 1 : 0;
  std::vector<int> changed(size), ranks;
  MPF_MPI_CHECK(MPI_Allgather(&mine, 1, MPI_INT, changed.data(), 1, MPI_INT, world));
  for (int r = 0; r < size; ++r) {
    if (changed[r]) ranks.push_back(r);
  }
  return ranks;
}

std::string suspect_line(int step, const std::vector<int>& ranks,
                         const std::vector<PlacementRow>& placement) {
  std::string named;
  for (const int r : ranks) {
    const std::string host = r < int(placement.size()) ? placement[r].place.host : "?";
    named += (named.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r) + " on " + host;
  }
  return "step " + std::to_string(step) +
         ": computed again from the same state, the gradients of " + named +
         " came out different (the training is bit-reproducible, so that hardware gave two "
         "answers to one question): stopped; resume from the newest checkpoint without that "
         "node, and have it checked";
}

}  // namespace mpf
