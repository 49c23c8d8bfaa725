// Seconds spent in each part of a step, summed over the timed steps, for the run's summary
// (docs/design.md, code style 9):
//   phases | data 0.1% | zero_grad 2.0% | fwd_bwd 80.1% | dp_comm 5.0% | optimizer 12.8%
#pragma once

#include <string>

#include "core/stopwatch.hpp"
#include "train/step_phases.hpp"

namespace mpf {

// Observes the run's phases (step_phases.hpp): each part ends where one of the step's phases
// does, after a Kokkos fence so asynchronous kernels are charged to the part that launched them.
class PhaseTimers : public PhaseObserver {
 public:
  // The steps before `first_timed` warm caches and pages and are not counted.
  explicit PhaseTimers(int first_timed) : first_timed_(first_timed) {}

  void entered(StepPhase phase, int step, double min_seconds) override;
  void left(StepPhase phase) override;

  // "phases | data 0.1% | zero_grad 2.0% | fwd_bwd 30.1% | ..." of the total timed.
  std::string summary() const;

 private:
  // fwd_bwd: the schedule loop, forwards and backwards of every microbatch, and the loss;
  // dp_comm: from there to the gradient norm; optimizer: the norm, the clip and the update.
  enum Part { kData, kZeroGrad, kSchedule, kDpComm, kOptimizer, kCount };
  // Adds the time since the previous mark (or the step's start) to `part`.
  void mark(Part part);

  int first_timed_;
  bool enabled_ = false;
  double seconds_[kCount] = {};
  Stopwatch since_mark_;
};

}  // namespace mpf
