// Interleaved 1F1B as a table (schedule_table.hpp): 1F1B's phases over the M·V micro-steps of
// schedule.hpp's order, min(2(P − rank − 1) + (V − 1)·G, M·V) warmup forwards, G = P + (M mod P).
// Bubble: (P − 1)/(V·M + P − 1). The P2P pass turns it into interleaved.cpp's op sequence exactly.
#include "pipeline/schedule_table.hpp"

namespace mpf::pipeline {

ScheduleTable interleaved_table(const PipelineShape& shape) {
  validate(shape, Schedule::kInterleaved);
  const int steps = shape.microbatches * shape.virtual_stages;
  ScheduleTable table(shape.stages);
  for (int r = 0; r < shape.stages; ++r) {
    PipelineShape mine = shape;
    mine.rank = r;
    const int warmup = interleaved_warmup(mine);
    auto forward = [&](int k) {
      return ComputeNode{NodeKind::kF, interleaved_microbatch(mine, k),
                         interleaved_forward_chunk(mine, k)};
    };
    auto backward = [&](int k) {
      return ComputeNode{NodeKind::kBW, interleaved_microbatch(mine, k),
                         interleaved_backward_chunk(mine, k)};
    };
    auto& nodes = table[r];
    for (int k = 0; k < warmup; ++k) nodes.push_back(forward(k));
    for (int i = 0; i < steps - warmup; ++i) {
      nodes.push_back(forward(warmup + i));
      nodes.push_back(backward(i));
    }
    for (int k = steps - warmup; k < steps; ++k) nodes.push_back(backward(k));
  }
  return table;
}

}  // namespace mpf::pipeline
