// A training run's reporter: what rank 0 prints (the banner, one line per step, the events of a
// step, validation and task scores, the summary), and the same figures into --metrics and
// --tensorboard, which it owns. It reads the run's state and changes none of it; the collective
// reports (stages, memory) gather every rank's figures first.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "eval/task_eval.hpp"
#include "io/event_file.hpp"
#include "pipeline/stage_costs.hpp"
#include "train/metrics_log.hpp"
#include "train/peak_tracker.hpp"
#include "train/step_outcome.hpp"

namespace mpf {

class TrainingRun;
struct StageTimes;

class RunReporter {
 public:
  // Rank 0 opens --metrics and --tensorboard: after every collective of the set-up, so that an
  // error here is agreed on by the caller.
  explicit RunReporter(const TrainingRun& run);

  // The banner and the metrics' "run" record, before the first step.
  void start() const;
  // A finished step: its line every --log-every steps, and its figures; `peak`: the MFU peak's
  // check of the step.
  void step(const StepRecord& s, const PeakCheck& peak) const;
  // Whether step s's line is printed (--log-every, the first and the last).
  bool logs_step(int s) const;
  // A mixture of experts' load: per block, the busiest expert's choices over the mean.
  void expert_load(int step, const std::vector<double>& load) const;
  void skip(const StepOutcome& s) const;
  void rerun(const StepOutcome& s) const;
  // The run stops: the status it stops with.
  int suspect(const StepOutcome& s) const;
  int divergence(const StepRecord& s, const std::string& newest_checkpoint) const;
  void validation(int step, double loss) const;
  // A checkpoint's figures (--metrics): the step's stall (a background save's copy, else the
  // whole save), the write's seconds, a wait for the previous one, its bytes.
  // A save's overlap: the fraction of its write's time during which training ran (not waited
  // for); 0 for a synchronous save.
  static double save_overlap(double write, double waited, bool background) {
    if (!background || write <= 0) return 0;
    return waited >= write ? 0 : 1 - waited / write;
  }
  void checkpoint(int step, double stall, double write, double waited, int64_t bytes,
                  bool background, bool ok) const;
  void task(int step, const TaskResult& r) const;
  // An evaluation (`what`) a stop signal ended after `done` of its `total` `units`: a line saying
  // so, and no score anywhere (a part of one is not the score).
  void cut_short(const std::string& what, int step, int done, int total, const char* units) const;
  void zb_plan(int step, const pipeline::OpCosts& costs, int limit) const;
  // Collective: the mean step time, tokens/s, MFU and the phases, --profile's table, and the
  // memory every rank measured against its prediction.
  void summary(int last, int status) const;
  // Collective: each stage's peak activations and mean F/B/W times.
  void stages(const StageTimes& timed) const;

 private:
  void print_environment() const;  // the banner: threads, GEMM, MPI, grid, model, data
  void print_layout() const;       // the banner: microbatches, pipeline, CP, DP, optimizer
  void print_plan() const;         // the banner: resume, checkpoints, MFU's terms
  void memory(int last) const;
  void record(const MetricsRecord& m) const;  // into --metrics, if any
  void scalars(int64_t step, const std::vector<std::pair<std::string, double>>& v) const;
  bool speaks() const;  // rank 0 of a verbose run

  const TrainingRun& run_;
  std::unique_ptr<MetricsLog> metrics_;  // rank 0, with --metrics
  std::unique_ptr<EventFile> events_;    // rank 0, with --tensorboard
};

}  // namespace mpf
