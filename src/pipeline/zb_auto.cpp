// zb-auto (Qi et al., ICLR 2024, §3 and §6): the schedule for measured costs. Given each stage's F,
// B and W times, the P2P time and a memory limit of L microbatches per rank (held from F to W),
// it runs the heuristic (greedy_schedule.hpp) for every choice of its open options and also
// takes the handcrafted schedules of the same chunk placement that fit the limit (1f1b, zb-h1
// and zb-h2 with one chunk per rank; zb-v in a V), simulates them all under the costs and keeps
// the shortest step. So its simulated step is never longer than the best handcrafted schedule's
// under the same limit, and it adapts where those assume F = B = W and free P2P.
#include <limits>

#include "core/error.hpp"
#include "pipeline/greedy_schedule.hpp"
#include "pipeline/replay.hpp"
#include "pipeline/schedule_table.hpp"
#include "pipeline/simulator.hpp"

namespace mpf::pipeline {

ScheduleTable zb_auto_table(const PipelineShape& shape, const OpCosts& costs, int max_in_flight) {
  validate(shape, Schedule::kZbAuto);
  require(max_in_flight >= 1,
          "--max-in-flight must be at least 1 microbatch, got " + std::to_string(max_in_flight));
  const int V = shape.virtual_stages;
  const int limit = max_in_flight * V;  // (mb, chunk)s
  std::vector<ScheduleTable> candidates;
  for (bool free_memory_first : {false, true}) {
    for (bool oldest_first : {true, false}) {
      if (V == 1 && !oldest_first) continue;  // one chunk: nothing to choose between
      candidates.push_back(greedy_schedule(shape, costs, limit, {free_memory_first, oldest_first}));
    }
  }
  auto handcrafted = [&](Schedule s) {
    PipelineShape h = shape;
    h.placement = placement_of(s, V);
    validate(h, s);
    candidates.push_back(schedule_table(s, h));
  };
  if (V == 1) {
    for (Schedule s : {Schedule::kOneFOneB, Schedule::kZbH1, Schedule::kZbH2}) handcrafted(s);
  } else {
    handcrafted(Schedule::kZbV);
  }
  ScheduleTable best;
  double best_makespan = std::numeric_limits<double>::infinity();
  for (ScheduleTable& t : candidates) {
    const SimulationResult r = PipelineReplay(t, shape).run(costs);
    if (r.peak_in_flight_overall > limit || r.makespan >= best_makespan) continue;
    best = std::move(t);
    best_makespan = r.makespan;
  }
  return best;  // the heuristic always fits the limit, so never empty
}

}  // namespace mpf::pipeline
