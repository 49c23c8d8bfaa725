// ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, §2.1): 1F1B with the weight
// gradients deferred. Rank r runs 1F1B's min(P − r − 1, M) warmup forwards, then F, B while
// forwards remain, then the remaining Bs; the W of microbatch k comes right after the B of
// microbatch k + r (rank r defers r of them) and the last r Ws close the rank's list.
//   Memory: at most P − r microbatches await their B on rank r, as in 1F1B, and r more await
//   their W; P held in all on every rank, 1F1B's peak (rank 0's).
//   Bubble: the Bs, no longer waiting for Ws, reach rank 0 (P − 1)·W earlier than in 1F1B, and the
//   deferred Ws fill the cooldown: (P − 1)(F + B − W) per rank instead of (P − 1)(F + B + W), so
//   (P − 1)/(3M + P − 1) of the step when F = B = W and M >= P (1F1B: 3(P − 1)/(3M + 3(P − 1))).
#include "pipeline/schedule_table.hpp"

namespace mpf::pipeline {

ScheduleTable zb_h1_table(const PipelineShape& shape) {
  validate(shape, Schedule::kZbH1);
  const int M = shape.microbatches;
  ScheduleTable table(shape.stages);
  for (int r = 0; r < shape.stages; ++r) {
    PipelineShape mine = shape;
    mine.rank = r;
    const int warmup = one_f_one_b_warmup(mine);
    auto& nodes = table[r];
    int w = 0;                         // the next microbatch to run its W
    auto weights_up_to = [&](int b) {  // the Ws due once the B of microbatch b is done
      for (; w <= b - r && w < M; ++w) nodes.push_back({NodeKind::kW, w, 0});
    };
    for (int mb = 0; mb < warmup; ++mb) nodes.push_back({NodeKind::kF, mb, 0});
    for (int b = 0; b < M; ++b) {
      if (warmup + b < M) nodes.push_back({NodeKind::kF, warmup + b, 0});
      nodes.push_back({NodeKind::kB, b, 0});
      weights_up_to(b);
    }
    weights_up_to(M - 1 + r);
  }
  return table;
}

}  // namespace mpf::pipeline
