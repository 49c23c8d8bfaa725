#include "pipeline/schedule_plan.hpp"

#include <cstdio>
#include <stdexcept>

#include "core/error.hpp"
#include "pipeline/simulator.hpp"

namespace mpf::pipeline {

void run_schedule(Schedule s, StageOps& ops, const PipelineShape& shape) {
  switch (s) {
    case Schedule::kAfab:
      return run_afab(ops, shape);
    case Schedule::kOneFOneB:
      return run_one_f_one_b(ops, shape);
    case Schedule::kInterleaved:
      return run_interleaved(ops, shape);
    default:
      throw InputError(std::string(schedule_name(s)) + " is a table: run it through a plan");
  }
}

SchedulePlan::SchedulePlan(Schedule s, const PipelineShape& shape, const OpCosts& costs,
                           int max_in_flight)
    : schedule_(s), shape_(shape) {
  validate(shape, s);
  if (!is_zero_bubble(s)) return;
  table_ = schedule_table(s, shape, costs, max_in_flight);
  const std::string broken = check_table(table_, shape);
  if (!broken.empty()) {
    throw std::logic_error(std::string("schedule ") + schedule_name(s) + ": " + broken);
  }
  programs_ = insert_p2p(table_, shape);
}

void SchedulePlan::run(StageOps& ops, int rank) const {
  if (!is_table()) {
    PipelineShape mine = shape_;
    mine.rank = rank;
    return run_schedule(schedule_, ops, mine);
  }
  execute(programs_.at(size_t(rank)), ops);
}

void require_within_memory(const SchedulePlan& plan, int max_in_flight) {
  const PipelineShape& shape = plan.shape();
  const int V = shape.virtual_stages;
  const SimulationResult r = simulate(plan);
  if (r.peak_in_flight_overall <= max_in_flight * V) return;
  int rank = 0;
  while (r.peak_in_flight[rank] != r.peak_in_flight_overall) ++rank;
  char need[32];
  std::snprintf(need, sizeof need, "%g", double(r.peak_in_flight_overall) / V);
  throw InputError(std::string("--schedule ") + schedule_name(plan.schedule()) + " holds " + need +
                   " microbatches' activations on pipeline rank " + std::to_string(rank) +
                   " here, above --max-in-flight " + std::to_string(max_in_flight) +
                   "; raise --max-in-flight, or use --schedule zb-auto, which keeps to the limit");
}

}  // namespace mpf::pipeline
