// The measured timeline of one training step on every rank, written as a Chrome/Perfetto trace
// (chrome://tracing, ui.perfetto.dev) so a real run's bubble can be set beside the simulator's
// (mpiformer-schedule --trace). A row per rank: the schedule's forwards (F), input gradients (B),
// weight gradients (W) and P2P waits as ModelStage records them, then the gradient sync and the
// optimizer.
//
// Clocks: each rank times from its own origin, taken right after a barrier at the start of the
// traced step, so rows line up to within the barrier's exit skew (microseconds on one node).
#pragma once

#include <string>
#include <vector>

#include "core/stopwatch.hpp"
#include "parallel/grid.hpp"
#include "pipeline/model_stage.hpp"
#include "train/step_phases.hpp"

namespace mpf {

// Observes the run's phases (step_phases.hpp): records the traced step's ops from the stage, and
// its gradient sync (from the end of compute to the gradient norm) and optimizer (the norm, the
// clip and the update) as spans of their own.
class StepTrace : public PhaseObserver {
 public:
  // Traces step `traced_step` (none if it is 0); `grid` and `stage` must outlive the trace.
  StepTrace(const Grid& grid, ModelStage& stage, int traced_step)
      : grid_(grid), stage_(stage), traced_step_(traced_step) {}
  bool traces(int step) const { return traced_step_ > 0 && step == traced_step_; }

  // Entering the traced step is collective over the grid's world: a barrier, then this rank's
  // origin.
  void entered(StepPhase phase, int step, double min_seconds) override;
  void left(StepPhase phase) override;

  // Collective: gathers every rank's events to world rank 0, which writes `path` (never
  // replacing an existing file: it warns and writes nothing instead).
  void write(const std::string& path) const;

 private:
  double now() const { return clock_.seconds(); }

  const Grid& grid_;
  ModelStage& stage_;
  int traced_step_;
  bool tracing_ = false;  // within the traced step
  double sync_start_ = 0.0, optimizer_start_ = 0.0;
  Stopwatch clock_;
  std::vector<StageEvent> events_;
};

}  // namespace mpf
