// The named phases of a training run: a step's compute -> sync -> update and the phases within
// them, and the work at a step's boundary. The trainer announces each phase as it enters and
// leaves it (PhaseScope); what watches a run (the watchdog, the step trace, the phase timers)
// observes the phases instead of being called from the step's code.
#pragma once

#include <vector>

namespace mpf {

enum class StepPhase {
  kTraining,  // the steps of a run, with the work at their boundaries
  kStep,      // one step: compute, sync, update
  kCompute,   // forward and backward of every microbatch, and the loss
  kData,
  kZeroGrads,
  kSchedule,     // the pipeline schedule's ops (observers are told each op: PhaseObserver::op)
  kScheduleEnd,  // completing the sends still in flight
  kLossSum,
  kZbPlanning,  // zb-auto's plan from the measured op times (one step of a run)
  kSync,        // the gradients made whole, and their norm
  kTiedSum,
  kDpReduce,
  kGradNorm,
  kUpdate,  // the optimizer
  kOptimizer,
  kZeroGather,
  // At the step's boundary.
  kStopAgreement,
  kValidation,
  kSample,
  kSave,
};

// As a person reads it in a message. The boundary's units read with their step after them
// ("save of step 40"). A string literal: observers may keep the pointer.
const char* phase_name(StepPhase phase);

class PhaseObserver {
 public:
  virtual ~PhaseObserver() = default;
  // `step`: the step the phase belongs to (0: the validation before the first step);
  // `min_seconds`: how long the phase may take at least (a save's size at 20 MB/s), else 0.
  virtual void entered(StepPhase phase, int step, double min_seconds) = 0;
  virtual void left(StepPhase phase) = 0;
  // A pipeline op starting within kSchedule or a validation: its name ("F", "B", "W", a P2P
  // verb), microbatch and chunk.
  virtual void op(const char* /*name*/, int /*mb*/, int /*chunk*/) {}
};

// The observers of a run's phases. Entries are told in the order the observers were added, exits
// in the reverse order, as nested scopes unwind: so an observer added later sees a phase start
// after, and end before, the ones added earlier (the trace's barrier before the timers' start,
// the timers' fence before the trace reads its clock).
class StepPhases {
 public:
  void observe(PhaseObserver& observer) { observers_.push_back(&observer); }
  void enter(StepPhase phase, int step, double min_seconds = 0.0);
  void leave(StepPhase phase);
  void op(const char* name, int mb, int chunk);
  // The step of the phase entered last.
  int step() const { return step_; }

 private:
  std::vector<PhaseObserver*> observers_;
  int step_ = 0;
};

// Being in a phase for a scope: entered on construction, left on destruction.
class PhaseScope {
 public:
  // A phase of step `step` (a step, or the work at its boundary).
  PhaseScope(StepPhases& phases, StepPhase phase, int step, double min_seconds = 0.0);
  // A phase within the step of the phase entered last.
  PhaseScope(StepPhases& phases, StepPhase phase) : PhaseScope(phases, phase, phases.step()) {}
  ~PhaseScope() { phases_.leave(phase_); }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

  // Leaves this phase and enters `phase`, of the same step: a step's phases in sequence.
  void next(StepPhase phase);

 private:
  StepPhases& phases_;
  StepPhase phase_;
};

}  // namespace mpf
