#include "pipeline/stage_costs.hpp"

#include <vector>

#include "core/error.hpp"

namespace mpf {

pipeline::OpCosts stage_costs(const StageTimes& times, int pp_rank, int pp_size, MPI_Comm world) {
  // Per stage: F, B, W milliseconds and their op counts, summed over the stage's ranks.
  std::vector<double> sums(6 * size_t(pp_size), 0.0);
  double* mine = sums.data() + 6 * pp_rank;
  mine[0] = times.forward;
  mine[1] = times.forwards;
  mine[2] = times.backward;
  mine[3] = times.backwards;
  mine[4] = times.weight;
  mine[5] = times.weights;
  MPF_MPI_CHECK(
      MPI_Allreduce(MPI_IN_PLACE, sums.data(), int(sums.size()), MPI_DOUBLE, MPI_SUM, world));
  pipeline::OpCosts costs;
  costs.p2p = 0.0;
  auto mean = [](double ms, double ops) { return ops > 0 ? ms / ops : 0.0; };
  for (int p = 0; p < pp_size; ++p) {
    const double* s = sums.data() + 6 * p;
    costs.forward_by_rank.push_back(mean(s[0], s[1]));
    costs.backward_by_rank.push_back(mean(s[2], s[3]));
    costs.weight_by_rank.push_back(mean(s[4], s[5]));
  }
  return costs;
}

}  // namespace mpf
