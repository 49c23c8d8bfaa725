// ZB-H2 (Qi et al., ICLR 2024, §2.2): more forwards up front, so the first B arrives as the
// warmup ends, and the Ws moved to the tail. Rank r runs w = min(2(P − r) − 1, M) warmup forwards,
// then for each microbatch b in order: B(b), the W of microbatch b − d, F(w + b) while forwards
// remain, with d = min(2r, M − w); the last d Ws close the list.
//   Memory: at most 2(P − r) − 1 microbatches await their B on rank r and up to 2r their W, 2P − 1
//   held in all on every rank.
//   Bubble: with F = B = W every rank computes without a break from its first forward to its last
//   W (a parallelogram, not 1F1B's trapezoid): the paper's (P − 1)(F + B − 2W) = 0. Its "zero"
//   counts on the next iteration's forwards starting in the slanted edges, which needs an
//   optimizer step without synchronisation (the paper's post-validation); here a step ends with a
//   synchronous optimizer step, so the two triangles, (P − 1)·F on each rank at equal costs,
//   remain: (P − 1)/(3M + P − 1), zb-h1's, at F = B = W, and less than zb-h1 as W shrinks.
#include <algorithm>

#include "pipeline/schedule_table.hpp"

namespace mpf::pipeline {

ScheduleTable zb_h2_table(const PipelineShape& shape) {
  validate(shape, Schedule::kZbH2);
  const int P = shape.stages, M = shape.microbatches;
  ScheduleTable table(P);
  for (int r = 0; r < P; ++r) {
    const int warmup = std::min(2 * (P - r) - 1, M);
    const int defer = std::min(2 * r, M - warmup);
    auto& nodes = table[r];
    int w = 0;
    auto weights_up_to = [&](int b) {
      for (; w <= b - defer && w < M; ++w) nodes.push_back({NodeKind::kW, w, 0});
    };
    for (int mb = 0; mb < warmup; ++mb) nodes.push_back({NodeKind::kF, mb, 0});
    for (int b = 0; b < M; ++b) {
      nodes.push_back({NodeKind::kB, b, 0});
      weights_up_to(b);
      if (warmup + b < M) nodes.push_back({NodeKind::kF, warmup + b, 0});
    }
    weights_up_to(M - 1 + defer);
  }
  return table;
}

}  // namespace mpf::pipeline
