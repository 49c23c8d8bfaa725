// A training run: builds the model, data and optimizer from the options (or resumes one from a
// checkpoint), then runs the steps. Each step reads as its phases (step_phases.hpp), which the
// watchdog, the trace and the phase timers observe (docs/design.md, code style 9):
//   compute (data, zero grads, the schedule's forwards and backwards, the loss)
//   -> sync (tied embedding, DP gradients, the norm) -> update (AdamW, ZeRO's all-gather)
// and ends at a boundary where the ranks agree whether to stop (a signal), and may validate,
// sample and save.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpointing.hpp"
#include "checkpoint/save_lock.hpp"
#include "checkpoint/state_files.hpp"
#include "data/loader.hpp"
#include "generate/training_sample.hpp"
#include "io/event_file.hpp"
#include "model/activations.hpp"
#include "model/parameters.hpp"
#include "optim/adamw.hpp"
#include "optim/grad_buckets.hpp"
#include "optim/grad_norm.hpp"
#include "optim/lr_schedule.hpp"
#include "parallel/grid.hpp"
#include "parallel/node.hpp"
#include "parallel/placement.hpp"
#include "pipeline/layer_ownership.hpp"
#include "pipeline/model_stage.hpp"
#include "pipeline/schedule.hpp"
#include "pipeline/schedule_plan.hpp"
#include "train/memory_plan.hpp"
#include "train/metrics_log.hpp"
#include "train/options.hpp"
#include "train/outlier_window.hpp"
#include "train/peak.hpp"
#include "train/peak_tracker.hpp"
#include "train/phase_timers.hpp"
#include "train/step_log.hpp"
#include "train/step_phases.hpp"
#include "train/step_rerun.hpp"
#include "train/step_trace.hpp"
#include "train/test_fault.hpp"
#include "train/watchdog.hpp"

namespace mpf {

// What world rank 0 alone reads and decides before any other rank reads a checkpoint directory:
// every rank then acts on rank 0's view of a shared file system, whose other nodes' views may lag.
struct StartPoint {
  int64_t resume_step = -1;        // the checkpoint --load resumes from; -1: none, a new run
  std::vector<std::string> notes;  // rank 0's, for it to print
};

// Rank 0's part of start-up, before anything is trained (no MPI: the app agrees on the outcome
// and broadcasts the step). With --save DIR: checks that DIR can be written, takes its lock into
// `lock` (held until the run ends; checkpoint/save_lock.hpp) and removes what provably gone
// writers left there, printing a note for each; then chooses the checkpoint --load resumes from
// and checks that the saves will overwrite nothing. Throws InputError.
StartPoint decide_start(const TrainOptions& opts, std::optional<checkpoint::SaveLock>& lock);

// Everything a run reads from the user's files and flags, checked. Loading involves no MPI call,
// so a rank that fails here never leaves the others waiting in a collective: the app agrees on
// the outcome (any_rank_failed) before building the run.
struct RunInputs {
  TrainOptions opts;  // as given, with a resumed run's settings taken from its checkpoint
  GPTConfig cfg;
  LRSchedule schedule;
  std::unique_ptr<DataLoader> train_data, val_data;
  std::string val_name;
  std::optional<ResumePoint> resume;         // --load found a checkpoint
  std::vector<std::string> notes, warnings;  // for rank 0 to print
  std::optional<Tokenizer> tokenizer;        // --tokenizer, for --sample-every
  int doc_token = -1;                        // --doc-mask: the token that starts a document
  std::optional<MetricsStart> metrics;       // rank 0, with --metrics: what its file keeps
};

// Throws InputError for any bad file or flag, or a checkpoint that cannot be resumed. `start`:
// rank 0's decision (decide_start), the same step on every rank. Rank 0 also checks that
// --save-llmc and --trace can be written.
RunInputs load_inputs(const TrainOptions& opts, const StartPoint& start, int world_rank);

struct TrainResult {
  std::vector<double> step_ms;  // each step's wall time (as rank 0 measured it)
  int status = 0;               // exit_status.hpp, the same on every rank
};

class TrainingRun {
 public:
  // Collective over `world`. Throws InputError, on every rank alike, if the layout does not fit
  // (the batch does not split over the data-parallel ranks) or a checkpoint or --init-from file
  // does not load (unreadable, corrupt, non-finite). With --dry-run it stops once the layout is
  // built and checked: nothing is allocated, loaded or initialised, and only dry_run() may follow.
  TrainingRun(RunInputs inputs, MPI_Comm world);
  // The stage's op listener points at this run.
  TrainingRun(const TrainingRun&) = delete;
  TrainingRun& operator=(const TrainingRun&) = delete;

  // Runs the steps up to opts.steps, logging on rank 0, saving as --save asks; writes
  // --save-llmc at the end. Stops early, with the status saying why, on a signal, a non-finite
  // loss or gradient norm (before that step's update), or a failed save.
  TrainResult train();

  // The memory this rank was predicted to hold at its peak (memory_plan.hpp).
  const MemoryPlan& memory_plan() const { return memory_; }
  // The GEMM rate MFU is held against: --peak-gflops, or measured at start-up.
  const PeakRate& peak_rate() const { return peak_; }

  // --dry-run: rank 0 prints the warnings and notes, every rank's placement and a summary of the
  // run (dry_run.cpp). Returns kExitDone.
  int dry_run() const;

  // Mean per-token loss over the global batch, from this rank's sum (every rank gets it).
  double global_mean_loss(double local_sum) const;
  // The global gradient norm: split tensors summed over the TP ranks, replicated ones once.
  double global_grad_norm() const;

 private:
  // What one step did: its log line's figures (the same on every rank, but ms), and what it
  // measured.
  struct StepOutcome {
    StepRecord log;
    bool diverged = false;     // a non-finite loss or norm: the update was not applied
    bool timed = false;        // counts into the run's mean step time
    bool ops_timed = false;    // stage_->times() hold its F, B and W times
    bool zb_planning = false;  // zb-auto plans from them
    // Against the outlier windows: the z-scores (NaN while a window fills), and whether
    // --skip-outliers skipped the update.
    double loss_z = 0.0, norm_z = 0.0;
    bool skipped = false;
    // --rerun-suspect: the step was computed again; `suspect` holds the ranks whose gradients
    // changed (the run stops), else the two computations agreed.
    bool rerun = false;
    std::vector<int> suspect;
  };
  // The steps so far, for the summary and the stop signals' grace.
  struct Tally {
    double slowest_ms = 0.0, timed_ms = 0.0, last_loss = 0.0;
    StageTimes ops;  // F, B and W over the timed steps whose ops were timed
  };

  // Set-up, in the constructor's order.
  void set_up_grid(MPI_Comm world);  // the grid and where its ranks run
  void plan_pipeline();  // the schedule and the pipeline's shape: they decide what a rank holds
  void plan_stages();    // the blocks of every chunk; what a stage needs of MPI and the batch
  // The memory this rank will hold at its peak (memory_plan.hpp), and the refusal of a layout
  // that exceeds what the rank may use (InputError, on every rank alike).
  void plan_memory_use();
  void shard_model();
  void set_up_optimizer();
  void load_state();  // the checkpoint's, an llm.c file's, or fresh parameters
  void set_up_stage();
  void set_up_sample(std::optional<Tokenizer> tokenizer);
  void set_up_batch();
  void observe_phases();

  // The step: compute -> sync -> update.
  StepOutcome step(int step);
  // Stop grace, op timing and the kernel profile for `step`; what it measures.
  StepOutcome prepare_step(int step);
  // Forward and backward of every microbatch through the schedule; the global mean loss.
  double compute();
  // The gradients made whole (the tied embedding's two stages summed, then the DP ranks');
  // their global norm.
  double sync();
  // AdamW with the gradients clipped by `norm`; parameters and their bf16 copy updated alike.
  void update(float lr, double norm);

  // The end-of-step policy: log, agree on a stop, validate, sample and save when due. The run's
  // exit status: kExitDone to go on.
  int after_step(const StepRecord& r);
  void tally(const StepOutcome& s, TrainResult& result);
  int report_divergence(const StepRecord& r) const;
  void log_step(const StepRecord& r) const;
  void report_validation(int step);
  // The mean step time, tokens/s, MFU and the phases; --profile's table.
  void report_run(int last, int status) const;
  // The peak resident memory every rank measured, against its prediction (memory_).
  void report_memory(int last) const;
  double tokens_per_step() const { return double(opts_.batch) * opts_.seq_len; }
  double flops_per_step() const;

  void load_batch(DataLoader& loader);
  double validate();
  // Collective: --save's checkpoint after `step`; false (rank 0 has said why) if it failed.
  bool save(int step);
  CheckpointInfo checkpoint_info(int step) const;
  // Collective: --save-llmc; false if it failed.
  bool save_llmc() const;
  // Collective: --save-hf; false if it failed.
  bool save_hf() const;
  void print_banner(const PeakRate& peak) const;
  // The most elements a product's operand spans (the size of the bf16 scratch).
  int64_t largest_operand() const;
  int64_t largest_operand(const TpShard& shard) const;  // of a stage not yet allocated
  // Collective: rank 0 prints each stage's peak activations and mean F/B/W times.
  void report_stages(const StageTimes& timed) const;
  // Collective: zb-auto's plan from step `step`'s measured op times (the steps before it run
  // zb-auto planned for F = B = W).
  void plan_zb_auto(int step);
  bool is_root() const { return grid_->world_rank() == 0; }
  // The part of the model TP rank t of pipeline stage p holds.
  TpShard stage_shard(int tp_rank, int pp_rank) const;
  // Adds the squares of qkvw segment `s` outside the replicated K and V rows (global_grad_norm).
  void add_unreplicated(SumOfSquares& squares, const float* grads, const OptimizerSegment& s) const;
  // Sums wte's gradient over the first and last stage (Megatron's tied-embedding all-reduce).
  void allreduce_tied_embedding();
  // Whether the embedding and the LM head, which share wte, are on different ranks.
  bool tied_across_stages() const;
  // zb-auto's memory limit: --max-in-flight, else P (1F1B's peak).
  int zb_auto_limit() const;

  TrainOptions opts_;
  GPTConfig cfg_;
  std::unique_ptr<Grid> grid_;
  std::vector<PlacementRow> placement_;  // every rank's, on rank 0
  int local_batch_ = 0;                  // rows of the global batch on this DP rank
  int local_seq_len_ = 0;                // positions of each row on this CP rank: T / cp
  int doc_token_ = -1;                   // --doc-mask's document token; -1: no masking
  int node_ranks_ = 1;                   // ranks on this rank's node
  MemoryPlan memory_;                    // predicted before anything was allocated
  LRSchedule schedule_;
  std::unique_ptr<DataLoader> train_data_, val_data_;
  std::string val_name_;
  TpShard shard_;
  Parameters params_, grads_;
  // --precision bf16: the parameters rounded to bf16, what the products read as weights; refreshed
  // after every update (derived state: checkpoints hold the fp32 parameters).
  Bf16Slab weights16_;
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<SumOfSquares> grad_squares_;  // the gradient norm's, read once a step
  std::unique_ptr<DataParallelGrads> dp_grads_;
  std::unique_ptr<StateFiles> state_files_;
  int first_step_ = 1;             // 1, or the step after the resumed checkpoint's
  int64_t tokens_seen_ = 0;        // training tokens through the model so far, over the whole run
  std::string newest_checkpoint_;  // the last saved or loaded, for messages
  std::optional<ResumePoint> resume_;
  double load_seconds_ = 0.0;  // reading the checkpoint
  std::vector<std::string> notes_, warnings_;
  int micro_batch_ = 0;  // rows of one microbatch
  pipeline::Schedule pp_schedule_ = pipeline::Schedule::kOneFOneB;
  pipeline::PipelineShape shape_;                 // this rank's: P, its stage, V, M, placement
  std::unique_ptr<pipeline::SchedulePlan> plan_;  // what each step runs
  bool auto_planned_ = false;                     // zb-auto: planned from measured times
  std::vector<LayerRange> layer_ranges_;          // blocks of every virtual stage
  std::unique_ptr<ModelStage> stage_;
  std::unique_ptr<TrainingSample> sample_;  // --sample-every
  Tokens batch_;  // this rank's inputs, then its targets, then (--doc-mask) the document starts
  HostTokens host_batch_;                  // the same, where the loader fills them
  HostTokens whole_rows_;                  // with CP or --doc-mask: the DP rank's whole rows
  std::vector<Tokens> inputs_, targets_;   // per microbatch: views into batch_
  std::vector<Tokens> doc_starts_;         // per microbatch, with --doc-mask
  PeakRate peak_;                          // this rank's, for MFU: measured before the allocations
  std::optional<PeakTracker> peak_flops_;  // all ranks' together over the run, from peak_
  Tally tally_;
  // The run's phases and what observes them.
  StepPhases phases_;
  std::unique_ptr<Watchdog> watchdog_;
  std::unique_ptr<StepTrace> trace_;
  std::optional<MetricsStart> metrics_start_;  // rank 0, with --metrics
  // The last --outlier-window losses and gradient norms (kept whether or not --skip-outliers is
  // on, so it may be turned on at a resume), and the updates skipped so far.
  OutlierWindow loss_window_{128}, norm_window_{128};
  int64_t skipped_updates_ = 0;
  TestFault test_fault_;  // MPIFORMER_TEST_FAULT, for the tests
  // Logs a skipped update (rank 0), into the log and --metrics.
  void report_skip(const StepOutcome& s) const;
  // --rerun-suspect: whether this step's values call for a second computation.
  bool suspect_values(double loss, double norm) const;
  int report_suspect(const StepOutcome& s) const;
  void report_rerun(const StepOutcome& s) const;
  std::unique_ptr<MetricsLog> metrics_;  // rank 0, with --metrics; opened last
  std::unique_ptr<EventFile> events_;    // rank 0, with --tensorboard; opened last
  // Scalars at `step` into --tensorboard, if any.
  void record_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& v) const;
  void record(const MetricsRecord& r) const;  // into --metrics, if any
  std::unique_ptr<PhaseTimers> timers_;
};

// The threads a rank should use: `requested` if positive, else OMP_NUM_THREADS if set, else the
// cores this process may run on divided by the ranks on its node (at least 1). Rank 0 warns when
// the ranks' threads outnumber its node's cores.
int choose_threads(int requested, const NodePlacement& place, MPI_Comm world);

}  // namespace mpf
