// Schedules as data: a schedule function returns, for every rank, the ordered list of its compute
// nodes; it says nothing about communication, which the P2P pass adds (stage_program.hpp). The
// zero-bubble schedules are written this way, each in its own file with its formula; the loop
// schedules are written as loops only, and their tables are recorded from them (loop_table.cpp).
//
// Node kinds, on (microbatch, chunk):
//   F   forward
//   B   backward for the input only (the activation gradient the previous stage waits for)
//   W   backward for the parameters only: free to run any time after its B, e.g. in a bubble
//   BW  B then W back to back (what the loops do); its gradient leaves after the W
#pragma once

#include <string>
#include <vector>

#include "pipeline/schedule.hpp"

namespace mpf::pipeline {

enum class NodeKind { kF, kB, kW, kBW };

struct ComputeNode {
  NodeKind kind;
  int mb, chunk;
  bool operator==(const ComputeNode& o) const {
    return kind == o.kind && mb == o.mb && chunk == o.chunk;
  }
};

// Per rank, its compute nodes in order.
using ScheduleTable = std::vector<std::vector<ComputeNode>>;

// "F3", "B3c1", "BW0" (the chunk only with V > 1).
std::string node_label(const ComputeNode& n, int virtual_stages);

// An InputError-free check for the schedule functions' tests and the plan: every rank runs F, B
// and W (or BW) of each of its (mb, chunk) exactly once, F before B before W, and the table, run
// with every send buffered, finishes (no rank waits for a message that cannot come). Returns ""
// or what is wrong.
std::string check_table(const ScheduleTable& table, const PipelineShape& shape);

// ---- the loop schedules (afab, 1f1b, interleaved): each rank's compute calls as its loop makes
// them, recorded; an InputError for a schedule without a loop ----
ScheduleTable loop_table(Schedule s, const PipelineShape& shape);

// ---- the zero-bubble schedules ----
ScheduleTable zb_h1_table(const PipelineShape& shape);
ScheduleTable zb_h2_table(const PipelineShape& shape);
ScheduleTable zb_v_table(const PipelineShape& shape);
// max_in_flight: microbatches' worth of activations a rank may hold (forwarded, W not done), at
// least 1; costs: the measured F, B, W per stage and the P2P time.
ScheduleTable zb_auto_table(const PipelineShape& shape, const OpCosts& costs, int max_in_flight);

// The table of any schedule (a loop schedule's recorded from its loop; zb-auto planned with
// `costs` and `max_in_flight`, 0: P).
ScheduleTable schedule_table(Schedule s, const PipelineShape& shape, const OpCosts& costs = {},
                             int max_in_flight = 0);

}  // namespace mpf::pipeline
