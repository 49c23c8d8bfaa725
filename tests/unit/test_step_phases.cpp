// The run's phases as their observers see them: entries in the order the observers were added,
// exits in the reverse order, a phase's step taken from the step entered last, ops passed on.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "train/step_phases.hpp"

namespace mpf {
namespace {

class Recorder : public PhaseObserver {
 public:
  Recorder(std::string name, std::vector<std::string>& log) : name_(std::move(name)), log_(log) {}
  void entered(StepPhase phase, int step, double min_seconds) override {
    log_.push_back(name_ + " enter " + phase_name(phase) + " " + std::to_string(step) +
                   (min_seconds > 0 ? " limit" : ""));
  }
  void left(StepPhase phase) override { log_.push_back(name_ + " leave " + phase_name(phase)); }
  void op(const char* op, int mb, int chunk) override {
    log_.push_back(name_ + " op " + op + std::to_string(mb) + "." + std::to_string(chunk));
  }

 private:
  std::string name_;
  std::vector<std::string>& log_;
};

TEST(StepPhases, ObserversSeeEntriesInOrderAndExitsInReverse) {
  std::vector<std::string> log;
  Recorder a("a", log), b("b", log);
  StepPhases phases;
  phases.observe(a);
  phases.observe(b);
  {
    PhaseScope step(phases, StepPhase::kStep, 7);
    PhaseScope phase(phases, StepPhase::kData);
    phases.op("F", 1, 0);
    phase.next(StepPhase::kLossSum);
  }
  const std::vector<std::string> expected = {"a enter step 7",
                                             "b enter step 7",
                                             "a enter data 7",
                                             "b enter data 7",
                                             "a op F1.0",
                                             "b op F1.0",
                                             "b leave data",
                                             "a leave data",
                                             "a enter loss all-reduce 7",
                                             "b enter loss all-reduce 7",
                                             "b leave loss all-reduce",
                                             "a leave loss all-reduce",
                                             "b leave step",
                                             "a leave step"};
  EXPECT_EQ(log, expected);
}

TEST(StepPhases, BoundaryWorkCarriesItsStepAndLimit) {
  std::vector<std::string> log;
  Recorder a("a", log);
  StepPhases phases;
  phases.observe(a);
  { PhaseScope save(phases, StepPhase::kSave, 40, 12.5); }
  EXPECT_EQ(log,
            (std::vector<std::string>{"a enter save of step 40 limit", "a leave save of step"}));
  EXPECT_EQ(phases.step(), 40);
}

}  // namespace
}  // namespace mpf
