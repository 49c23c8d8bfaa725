// The pipeline simulator's time model on one thread. simulate runs a thread per stage and pays a
// context switch per message: seconds for one layout of 128 stages, hours for the planner's
// search over thousands of them. A step's verbs on every rank do not depend on the costs (except
// zb-auto's, planned under them), so they are recorded once by running the schedule's own plan
// (or a table's programs) on a recording StageOps, then replayed under any costs with the
// simulator's time model (buffered sends: a send completes at once, its message arrives P2P
// later unless it stays on its rank, and a verb waits for all its receives). The result, events
// included, equals simulate's (tests/unit/test_plan.cpp checks every schedule). zb-v and zb-auto
// choose among their candidate tables with it; the planner times every layout with it.
#pragma once

#include <cstdint>
#include <vector>

#include "pipeline/schedule_plan.hpp"
#include "pipeline/schedule_table.hpp"
#include "pipeline/simulator.hpp"

namespace mpf::pipeline {

class PipelineReplay {
 public:
  explicit PipelineReplay(const SchedulePlan& plan);
  // A table's, as SchedulePlan would run it (its programs with the P2P verbs inserted).
  PipelineReplay(const ScheduleTable& table, const PipelineShape& shape);

  // The step under `costs` (per-rank F, B, W and the P2P time); SimulationError on a deadlock.
  SimulationResult run(const OpCosts& costs) const;
  // Each rank's compute ops in program order, times left 0: what the memory plan reads.
  SimulationResult order() const;
  // Verbs held, for the caller's cache to bound its size.
  size_t size() const;

 private:
  // A compute op (kind F, B or W; a = mb, b = chunk) or a verb's exchange of one or two halves
  // (a and b: channel * 4 + 2 send + local, or -1).
  struct Verb {
    uint8_t kind;
    int32_t a, b;
  };
  template <class Run>
  void record(Run&& run);  // run(ops, rank) posts rank's verbs on ops
  PipelineShape shape_;
  std::vector<std::vector<Verb>> verbs_;  // per rank
  friend class Recorder;
};

}  // namespace mpf::pipeline
