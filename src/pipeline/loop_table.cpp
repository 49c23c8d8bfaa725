// The loop schedules as data: each rank's loop runs against a StageOps that only records
// (OpRecorder), and its compute calls, in order, are that rank's row of the table. The loops stay
// the one written form of afab, 1f1b and interleaved; what needs one of them as a table (zb-auto's
// candidates, the simulator through a table, the tests' checks) records it here.
#include "pipeline/stage_program.hpp"

namespace mpf::pipeline {

namespace {

// A program's compute calls as nodes; the P2P verbs are dropped (the pass places them again). A B
// followed at once by the W of the same (mb, chunk) is one BW node, whose gradient the pass sends
// after the W, as the loops do.
std::vector<ComputeNode> compute_nodes(const StageProgram& program) {
  std::vector<ComputeNode> nodes;
  const StageOp* previous = nullptr;
  for (const StageOp& op : program) {
    switch (op.kind) {
      case OpKind::kForward:
        nodes.push_back({NodeKind::kF, op.mb, op.chunk});
        break;
      case OpKind::kBackwardInput:
        nodes.push_back({NodeKind::kB, op.mb, op.chunk});
        break;
      case OpKind::kBackwardWeight:
        if (previous && *previous == StageOp{OpKind::kBackwardInput, op.mb, op.chunk}) {
          nodes.back().kind = NodeKind::kBW;
        } else {
          nodes.push_back({NodeKind::kW, op.mb, op.chunk});
        }
        break;
      default:
        break;
    }
    previous = &op;
  }
  return nodes;
}

}  // namespace

ScheduleTable loop_table(Schedule s, const PipelineShape& shape) {
  validate(shape, s);
  ScheduleTable table;
  for (int r = 0; r < shape.stages; ++r) {
    OpRecorder rec;
    PipelineShape mine = shape;
    mine.rank = r;
    run_schedule(s, rec, mine);  // an InputError for a schedule that has no loop
    table.push_back(compute_nodes(rec.program));
  }
  return table;
}

}  // namespace mpf::pipeline
