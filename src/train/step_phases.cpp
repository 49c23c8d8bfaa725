#include "train/step_phases.hpp"

namespace mpf {

const char* phase_name(StepPhase phase) {
  switch (phase) {
    case StepPhase::kTraining:
      return "training";
    case StepPhase::kStep:
      return "step";
    case StepPhase::kCompute:
      return "compute";
    case StepPhase::kData:
      return "data";
    case StepPhase::kZeroGrads:
      return "zeroing the gradients";
    case StepPhase::kSchedule:
      return "pipeline schedule";
    case StepPhase::kScheduleEnd:
      return "end of the schedule (completing sends)";
    case StepPhase::kLossSum:
      return "loss all-reduce";
    case StepPhase::kZbPlanning:
      return "zb-auto planning (all-reduce of the measured op times)";
    case StepPhase::kSync:
      return "gradient sync";
    case StepPhase::kTiedSum:
      return "tied-embedding all-reduce";
    case StepPhase::kDpReduce:
      return "data-parallel gradient all-reduce";
    case StepPhase::kGradNorm:
      return "gradient norm all-reduce";
    case StepPhase::kUpdate:
      return "update";
    case StepPhase::kOptimizer:
      return "optimizer";
    case StepPhase::kZeroGather:
      return "ZeRO parameter all-gather";
    case StepPhase::kStopAgreement:
      return "stop-signal agreement";
    case StepPhase::kValidation:
      return "validation after step";
    case StepPhase::kSample:
      return "sample after step";
    case StepPhase::kSave:
      return "save of step";
  }
  return "?";
}

void StepPhases::enter(StepPhase phase, int step, double min_seconds) {
  step_ = step;
  for (PhaseObserver* o : observers_) o->entered(phase, step, min_seconds);
}

void StepPhases::leave(StepPhase phase) {
  for (auto o = observers_.rbegin(); o != observers_.rend(); ++o) (*o)->left(phase);
}

void StepPhases::op(const char* name, int mb, int chunk) {
  for (PhaseObserver* o : observers_) o->op(name, mb, chunk);
}

PhaseScope::PhaseScope(StepPhases& phases, StepPhase phase, int step, double min_seconds)
    : phases_(phases), phase_(phase) {
  phases_.enter(phase, step, min_seconds);
}

void PhaseScope::next(StepPhase phase) {
  phases_.leave(phase_);
  phase_ = phase;
  phases_.enter(phase, phases_.step());
}

}  // namespace mpf
