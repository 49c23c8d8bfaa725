// The schedule a run executes, made once before the first step: a loop (afab, 1f1b,
// interleaved: the readable reference, run as written), or, for the zero-bubble schedules, every
// rank's program, made from the schedule's table by the P2P pass and run by the executor
// (stage_program.hpp). The trainer and the simulator both run steps through a plan.
#pragma once

#include <vector>

#include "pipeline/schedule.hpp"
#include "pipeline/schedule_table.hpp"
#include "pipeline/stage_program.hpp"

namespace mpf::pipeline {

class SchedulePlan {
 public:
  // Validates the shape (InputError); zb-auto is planned with `costs` under max_in_flight
  // microbatches per rank (0: P, 1F1B's peak).
  SchedulePlan(Schedule s, const PipelineShape& shape, const OpCosts& costs = {},
               int max_in_flight = 0);

  Schedule schedule() const { return schedule_; }
  const PipelineShape& shape() const { return shape_; }
  bool is_table() const { return !programs_.empty(); }
  const ScheduleTable& table() const { return table_; }
  const std::vector<StageProgram>& programs() const { return programs_; }

  // Runs pipeline rank `rank`'s part of one step on `ops`.
  void run(StageOps& ops, int rank) const;

 private:
  Schedule schedule_;
  PipelineShape shape_;
  ScheduleTable table_;
  std::vector<StageProgram> programs_;  // per rank; empty for a loop
};

// InputError unless every rank of `plan` holds at most max_in_flight microbatches' activations
// (forwarded, W not yet done), measured by simulating one step. The message names the schedule's
// peak and the ways out.
void require_within_memory(const SchedulePlan& plan, int max_in_flight);

}  // namespace mpf::pipeline
