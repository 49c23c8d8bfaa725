// ZB-V (Qi et al., ICLR 2024, §6): two chunks per rank placed in a V (placement.hpp: rank r holds
// virtual stages r and 2P − 1 − r), so a microbatch's forward and its backward both start and end
// on rank 0 and rank 0 can begin its Bs without waiting for the whole pipeline's way back. As in
// the paper, the order comes from the heuristic (greedy_schedule.hpp) under F = B = W for every
// chunk and a memory limit of P microbatches (2P chunks' worth), 1F1B's peak: warmup forwards up
// to the limit, then F, B, W groups, then the remaining Bs with Ws in the gaps. Of the heuristic's
// two open choices, the one with the shorter step is kept.
//   Memory: at most P microbatches' activations on any rank (as 1F1B's rank 0), balanced over the
//   ranks.
//   Bubble: with F = B = W, none in the steady state; the ramps at both ends are made of half
//   stages, so the step's bubble is below zb-h1's (e.g. P = 4, M = 8: 5.88% against 11.11%).
#include <limits>

#include "pipeline/greedy_schedule.hpp"
#include "pipeline/replay.hpp"
#include "pipeline/schedule_table.hpp"

namespace mpf::pipeline {

ScheduleTable zb_v_table(const PipelineShape& shape) {
  validate(shape, Schedule::kZbV);
  OpCosts unit;
  unit.forward = unit.backward_input = unit.backward_weight = 1.0;
  const int limit = shape.stages * shape.virtual_stages;
  ScheduleTable best;
  double best_makespan = std::numeric_limits<double>::infinity();
  for (bool free_memory_first : {false, true}) {
    ScheduleTable t = greedy_schedule(shape, unit, limit, {free_memory_first, true});
    const double makespan = PipelineReplay(t, shape).run(unit).makespan;
    if (makespan < best_makespan) {
      best = std::move(t);
      best_makespan = makespan;
    }
  }
  return best;
}

}  // namespace mpf::pipeline
