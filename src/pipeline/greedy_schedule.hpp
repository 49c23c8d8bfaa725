// The list scheduler behind zb-v and zb-auto: the heuristic of Qi et al. (ICLR 2024, §3.1 and §6)
// as a simulation. Every rank, whenever it is free, picks its next compute node from what is
// ready under the cost model:
//   1. a B whose output gradient has arrived (the critical path: the previous stage waits for
//      it), the latest virtual stage first;
//   2. else an F whose input has arrived, if the rank's memory allows another microbatch (as
//      many forwards as the limit lets it run before its first B);
//   3. else a W, to fill the wait for the next arrival — only if that wait is at least W long,
//      unless memory is full (a W frees a microbatch's activations);
//   4. else it waits for the next arrival.
// In a V, admitting a microbatch to chunk 0 reserves room for its chunk 1, so the limit can
// never stop a microbatch halfway. The remaining Ws run last. Two choices are left open as
// options (the paper's hyperparameters); callers try them and keep the shortest schedule.
#pragma once

#include "pipeline/schedule_table.hpp"

namespace mpf::pipeline {

struct GreedyOptions {
  // When a forward waits only for memory, run a W first even if a B is ready.
  bool free_memory_first = false;
  // Among ready forwards (V > 1), the oldest microbatch; else the earliest virtual stage.
  bool oldest_first = true;
};

// limit: (mb, chunk) activations a rank may hold (forwarded, W not yet done), at least V.
// Supports V = 1 and the V placement (V = 2).
ScheduleTable greedy_schedule(const PipelineShape& shape, const OpCosts& costs, int limit,
                              const GreedyOptions& options);

}  // namespace mpf::pipeline
