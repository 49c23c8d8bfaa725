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

namespace mpf {

class StepTrace {
 public:
  // Collective over the grid's world: the barrier, then this rank's origin.
  void begin(const Grid& grid);
  double now() const { return clock_.seconds(); }
  std::vector<StageEvent>* events() { return &events_; }
  // A phase outside the schedule (name must be a string literal).
  void add(const char* name, double start, double end) {
    events_.push_back({name, -1, -1, start, end});
  }
  // Collective: gathers every rank's events to world rank 0, which writes `path` (never
  // replacing an existing file: it warns and writes nothing instead).
  void write(const std::string& path, const Grid& grid) const;

 private:
  Stopwatch clock_;
  std::vector<StageEvent> events_;
};

}  // namespace mpf
