// The planner's cost model: a layout's step time, term by term, and its peak memory per rank.
//
// Each pipeline stage's forward (F), input-gradient (B) and weight-gradient (W) time per
// (microbatch, chunk) is its matrix products' FLOPs at the machine's GEMM rate for their size,
// the fused attention's FLOPs at its rate, the element-wise kernels' bytes at the device's
// bandwidth, a launch overhead per kernel, and the TP, CP and EP communication the op waits for
// (CP's ring only where it outlasts the attention it overlaps). The pipeline's makespan is the
// project's own schedule run by the simulator under those costs, with each P2P message's time;
// the data-parallel gradient sum (not overlapped: the trainer's default), the optimizer and the
// step's small collectives follow it. Memory is the run's own plan (layout/layout_memory.hpp).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "layout/memory_plan.hpp"
#include "pipeline/replay.hpp"
#include "plan/layout.hpp"
#include "plan/machine.hpp"

namespace mpf::plan {

// Milliseconds of one op, by what it waits for.
struct OpTime {
  double compute = 0, tp = 0, cp = 0, ep = 0;
  double total() const { return compute + tp + cp + ep; }
};

// A stage's mean costs per (microbatch, chunk), and what it sends per P2P message.
struct StageCost {
  OpTime f, b, w;
  double p2p_bytes = 0;
};

// Milliseconds per step, by term. compute, tp, cp and ep are the busiest stage's; bubble is the
// rest of the pipeline's makespan (its idle time, the P2P waits among it).
struct StepTerms {
  double compute = 0, bubble = 0, tp = 0, cp = 0, ep = 0, dp = 0, optimizer = 0;
  double step() const { return compute + bubble + tp + cp + ep + dp + optimizer; }
};

struct Prediction {
  StepTerms ms;
  double tokens_per_s = 0, mfu = 0;
  double bubble_fraction = 0;  // the simulator's idle share of the pipeline
  MemoryPlan memory;           // the stage with the largest peak
  int64_t memory_limit = 0;    // bytes a rank may use on the machine
  bool fits = true;
};

// The devices (cores or GPUs) one rank computes on: a GPU each, or the node's cores over its ranks.
double devices_per_rank(const Machine& m, const Job& job);

// A product of `flops` on `devices` devices, in ms: the machine's rate for its size per device.
double gemm_ms(const Machine& m, Precision p, double flops, double devices);
// The fused attention's forward or backward (work counted as 2x the forward's) over sequences of
// seq_len, in ms.
double attention_ms(const Machine& m, Precision p, double flops, int seq_len, bool backward,
                    double devices);

StageCost stage_cost(const Job& job, const Machine& m, const Layout& l, int pp_rank);

// Predicts many layouts of one job, sharing what they share: each layout's stage costs (the same
// under ZeRO or not, and for the schedules of one placement) and each schedule's recorded
// program (pipeline/replay.hpp). The layouts must be ones layout_problem accepts.
class Predictor {
 public:
  Predictor(const Job& job, const Machine& m);

  // A lower bound of the predicted step, without simulating: the busiest rank's ops after the
  // forwards its first input waits for, the DP sum and the optimizer; only the pipeline's idle
  // time between ops is missing.
  double step_bound(const Layout& l);
  // A lower bound of the peak per rank: the larger of the first and last stages' plans, each
  // holding what the same schedule holds at M = P (or one microbatch, for M < P).
  MemoryPlan memory_bound(const Layout& l);
  // The peak per rank, as predict() gives it, without timing the pipeline (zb-auto's plan
  // depends on the costs: not for it).
  MemoryPlan memory(const Layout& l);
  int64_t memory_limit() const;  // bytes a rank may use on the machine
  Prediction predict(const Layout& l);

 private:
  // A plan of the schedule at M = P, and per rank the most (microbatch, chunk) sets it holds and
  // the most awaiting W.
  struct Floor {
    pipeline::SchedulePlan plan;
    std::vector<std::pair<int, int>> peaks;
  };
  const std::vector<StageCost>& stages(const Layout& l);
  int64_t slab_count(const Layout& l, int pp_rank);  // SlabLayout::count_of of a stage's shard
  const pipeline::PipelineReplay& program(const Layout& l, const pipeline::OpCosts& costs);
  const Floor& floor(const Layout& l);
  const std::vector<std::vector<std::pair<int, int>>>& held(const Layout& l);
  MemoryPlan stage_memory(const Layout& l, const pipeline::SimulationResult& order, int pp_rank);

  Job job_;
  const Machine& m_;
  std::map<std::vector<int64_t>, std::vector<StageCost>> stage_cache_;
  std::map<std::vector<int64_t>, pipeline::PipelineReplay> programs_;  // by schedule, P, V, M
  std::map<std::vector<int64_t>, Floor> floors_;                       // by schedule, P, V
  // Per rank, the distinct (sets held, sets awaiting W) in order; by schedule, P, V, M.
  std::map<std::vector<int64_t>, std::vector<std::vector<std::pair<int, int>>>> held_;
  // Per rank, its message buffers at once (pipeline::SimulationResult's peak_grad_sends,
  // peak_grad_receives and peak_messages, at the simulator's unit costs); keyed as held_.
  struct Buffers {
    std::vector<int> sends, receives, messages;
  };
  std::map<std::vector<int64_t>, Buffers> buffers_;
  std::map<std::array<int, 6>, int64_t> slab_counts_;  // by tp, ep, pp, V, placement, pp rank
  size_t program_verbs_ = 0, cached_stages_ = 0, held_pairs_ = 0;
  std::unique_ptr<pipeline::PipelineReplay>
      unplanned_;  // zb-auto's, planned under the last layout's costs
};

// One layout (one layout_problem accepts).
Prediction predict(const Job& job, const Machine& m, const Layout& l);

}  // namespace mpf::plan
