// AFAB as a table (schedule_table.hpp): every forward, then every backward in the same order, B
// and W back to back. Bubble: (P − 1)/(M + P − 1). The P2P pass turns it into afab.cpp's op
// sequence exactly.
#include "pipeline/schedule_table.hpp"

namespace mpf::pipeline {

ScheduleTable afab_table(const PipelineShape& shape) {
  validate(shape, Schedule::kAfab);
  ScheduleTable table(shape.stages);
  for (auto& nodes : table) {
    for (int mb = 0; mb < shape.microbatches; ++mb) nodes.push_back({NodeKind::kF, mb, 0});
    for (int mb = 0; mb < shape.microbatches; ++mb) nodes.push_back({NodeKind::kBW, mb, 0});
  }
  return table;
}

}  // namespace mpf::pipeline
