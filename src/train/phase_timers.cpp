#include "train/phase_timers.hpp"

#include <cstdio>

#include <Kokkos_Core.hpp>

namespace mpf {

void PhaseTimers::entered(StepPhase phase, int step, double /*min_seconds*/) {
  if (phase != StepPhase::kStep) return;
  enabled_ = step >= first_timed_;
  since_mark_.reset();
}

void PhaseTimers::left(StepPhase phase) {
  switch (phase) {
    case StepPhase::kData:
      return mark(kData);
    case StepPhase::kZeroGrads:
      return mark(kZeroGrad);
    case StepPhase::kCompute:
      return mark(kSchedule);
    case StepPhase::kDpReduce:
      return mark(kDpComm);
    case StepPhase::kUpdate:
      return mark(kOptimizer);
    default:
      return;
  }
}

void PhaseTimers::mark(Part part) {
  Kokkos::fence();
  if (enabled_) seconds_[part] += since_mark_.seconds();
  since_mark_.reset();
}

std::string PhaseTimers::summary() const {
  static const char* names[kCount] = {"data", "zero_grad", "fwd_bwd", "dp_comm", "optimizer"};
  double total = 0.0;
  for (double s : seconds_) total += s;
  std::string text = "phases";
  for (int i = 0; i < kCount; ++i) {
    char buf[64];
    std::snprintf(buf, sizeof buf, " | %s %.1f%%", names[i],
                  total > 0 ? 100.0 * seconds_[i] / total : 0.0);
    text += buf;
  }
  return text;
}

}  // namespace mpf
