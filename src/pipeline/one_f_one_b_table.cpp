// 1F1B as a table (schedule_table.hpp): min(P − rank − 1, M) warmup forwards, then one forward
// and one backward (B and W back to back) while forwards remain, then the remaining backwards.
// Bubble: (P − 1)/(M + P − 1). The P2P pass turns it into one_f_one_b.cpp's op sequence exactly.
#include "pipeline/schedule_table.hpp"

namespace mpf::pipeline {

ScheduleTable one_f_one_b_table(const PipelineShape& shape) {
  validate(shape, Schedule::kOneFOneB);
  const int M = shape.microbatches;
  ScheduleTable table(shape.stages);
  for (int r = 0; r < shape.stages; ++r) {
    PipelineShape mine = shape;
    mine.rank = r;
    const int warmup = one_f_one_b_warmup(mine);
    auto& nodes = table[r];
    for (int mb = 0; mb < warmup; ++mb) nodes.push_back({NodeKind::kF, mb, 0});
    for (int i = 0; i < M - warmup; ++i) {
      nodes.push_back({NodeKind::kF, warmup + i, 0});
      nodes.push_back({NodeKind::kBW, i, 0});
    }
    for (int mb = M - warmup; mb < M; ++mb) nodes.push_back({NodeKind::kBW, mb, 0});
  }
  return table;
}

}  // namespace mpf::pipeline
