// A training run: builds the model, data and optimizer from the options (or resumes one from a
// checkpoint), then runs the steps. Each step reads as its phases (step_phases.hpp), which the
// watchdog, the trace and the phase timers observe (docs/design.md, code style 9):
//   compute (data, zero grads, the schedule's forwards and backwards, the loss)
//   -> sync (tied embedding, DP gradients, the norm) -> update (AdamW, ZeRO's all-gather)
// and ends at a boundary where the ranks agree whether to stop (a signal), and may save,
// validate, score a task and sample. The run is in parts, as a molecular-dynamics code splits its
// time step: its inputs are resolved before it (run_inputs.hpp); it is built (run_setup.cpp) and
// runs its step loop (trainer.cpp) and its evaluations (evaluation.cpp); a reporter says what it
// does (run_reporter.hpp) and a saver writes it (run_saver.hpp). The two read the run's state.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/state_files.hpp"
#include "data/loader.hpp"
#include "eval/task_eval.hpp"
#include "generate/training_sample.hpp"
#include "io/event_file.hpp"
#include "layout/layout_memory.hpp"
#include "layout/memory_plan.hpp"
#include "layout/options.hpp"
#include "layout/peak.hpp"
#include "layout/step_log.hpp"
#include "model/activations.hpp"
#include "model/layers/matmul.hpp"
#include "model/parameters.hpp"
#include "optim/adamw.hpp"
#include "optim/grad_buckets.hpp"
#include "optim/grad_norm.hpp"
#include "optim/lr_schedule.hpp"
#include "optim/muon.hpp"
#include "optim/sharded_blocks.hpp"
#include "parallel/grid.hpp"
#include "parallel/groups.hpp"
#include "parallel/node.hpp"
#include "parallel/placement.hpp"
#include "pipeline/layer_ownership.hpp"
#include "pipeline/model_stage.hpp"
#include "pipeline/schedule.hpp"
#include "pipeline/schedule_plan.hpp"
#include "train/batch_buffers.hpp"
#include "train/metrics_log.hpp"
#include "train/outlier_window.hpp"
#include "train/peak_tracker.hpp"
#include "train/phase_timers.hpp"
#include "train/run_inputs.hpp"
#include "train/run_reporter.hpp"
#include "train/run_saver.hpp"
#include "train/step_outcome.hpp"
#include "train/step_phases.hpp"
#include "train/step_rerun.hpp"
#include "train/step_trace.hpp"
#include "train/test_fault.hpp"
#include "train/watchdog.hpp"

namespace mpf {

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
  ~TrainingRun();

  // Runs the steps up to opts.steps, logging on rank 0, saving as --save asks; writes
  // --save-llmc at the end. Stops early, with the status saying why, on a signal, a non-finite
  // loss or gradient norm (before that step's update), or a failed save.
  TrainResult train();

  // Collective: --eval-data scored by the model as it was loaded, outside any training
  // (evaluation.cpp; mpiformer-eval); every rank gets the result, with each example's scores when
  // `details`. A stop signal ends it early, cut_short (stop_signal() says which).
  TaskResult evaluate(bool details);
  // The stop signal the ranks agreed on, at a step's end or between evaluation batches; 0: none.
  int stop_signal() const { return stop_signal_; }
  // The step the model has been trained to: 0, or the resumed checkpoint's.
  int trained_steps() const { return first_step_ - 1; }

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
  friend class RunReporter;
  friend class RunSaver;

  // The steps so far, for the summary and the stop signals' grace.
  struct Tally {
    double slowest_ms = 0.0, timed_ms = 0.0, last_loss = 0.0;
    StageTimes ops;  // F, B and W over the timed steps whose ops were timed
  };

  // Set-up, in the constructor's order (run_setup.cpp).
  void set_up_grid(MPI_Comm world);  // the grid and where its ranks run
  void split_zero_by_node();         // --zero-group node's groups, or its refusals
  void plan_pipeline();  // the schedule and the pipeline's shape: they decide what a rank holds
  void plan_stages();    // the blocks of every chunk; what a stage needs of MPI and the batch
  // The memory this rank will hold at its peak (memory_plan.hpp), and the refusal of a layout
  // that exceeds what the rank may use (InputError, on every rank alike).
  void plan_memory_use();
  LayoutSizes layout_sizes() const;  // what the memory plan reads of the layout
  MemoryShape memory_shape() const;
  void shard_model();
  void set_up_optimizer();
  void load_state();  // the checkpoint's, an llm.c file's, or fresh parameters
  void set_up_stage();
  void set_up_sample(std::optional<Tokenizer> tokenizer);
  void observe_phases();

  // The step: compute -> sync -> update.
  StepOutcome step(int step);
  // Stop grace, op timing and the kernel profile for `step`; what it measures.
  StepOutcome prepare_step(int step);
  // Forward and backward of every microbatch through the schedule; the global mean loss.
  double compute();
  double global_aux_loss() const;  // the step's balance loss (mixtures of experts)
  // A value summed over the DP x CP ranks and the pipeline stages (TP ranks hold the same).
  double sum_over_data_and_stages(double local) const;
  // The step's (token, slot) choices of each expert, (L, E) over all ranks.
  std::vector<double> global_expert_load() const;
  // The gradients made whole (the tied embedding's two stages summed, then the DP ranks');
  // their global norm.
  double sync();
  // AdamW with the gradients clipped by `norm`; parameters and their bf16 copy updated alike.
  void update(float lr, double norm);
  // --qk-clip after an update: each head's largest logit of the step, the largest over the ranks
  // holding its parameters (DP x CP), and the heads above it scaled (optim/qk_clip.hpp).
  void clip_qk(StepRecord& log);
  // --moe-bias-update-rate after an update: each routing bias moved toward balance by the
  // step's loads over all ranks (the same bits on every rank).
  void update_moe_bias();
  // The z-scores against the outlier windows; --skip-outliers' decision.
  void judge_outlier(StepOutcome& out);

  // The end-of-step policy: log, agree on a stop, save, validate, score and sample when due. The
  // run's exit status: kExitDone to go on.
  int after_step(const StepRecord& r);
  // What a signal's stop prints and returns.
  int stop_after(int signal, int step) const;
  void tally(const StepOutcome& s, TrainResult& result);
  double tokens_per_step() const { return double(opts_.batch) * opts_.seq_len; }
  double flops_per_step() const;

  // Evaluation (evaluation.cpp): the validation loss, and --eval-data's scores, when due. Each
  // asks between its batches whether to stop (stop_requested) and ends early if so, with no score
  // reported; neither starts once a stop is agreed on.
  // The mean loss of --val-steps batches; none if cut short, `batches` those it took.
  std::optional<double> validate(int& batches);
  void validate_at(int step);
  void score_task_at(int step);
  // Collective (every rank between the same two batches): whether some rank got a stop signal,
  // kept in stop_signal_.
  bool stop_requested();
  // --eval-data's scores, inside the caller's bf16 scope if any.
  TaskResult score_task(bool details);
  // With --precision bf16, opens `scope`: while it lives the products read the weights' bf16 copy
  // (model/layers/matmul.hpp). A scope for train() and one for evaluate(), never nested.
  void open_bf16_products(std::optional<Bf16Products>& scope) const;
  // The model's per-token losses of B whole rows (task_eval.hpp's RowLosses), on every rank.
  void row_losses(const int32_t* inputs, const int32_t* targets, float* losses);

  // The most elements a product's operand spans (the size of the bf16 scratch).
  int64_t largest_operand() const;
  int64_t largest_operand(const TpShard& shard) const;  // of a stage not yet allocated
  // Collective: zb-auto's plan from step `step`'s measured op times (the steps before it run
  // zb-auto planned for F = B = W).
  void plan_zb_auto(int step);
  bool is_root() const { return grid_->world_rank() == 0; }
  // Adds the squares of qkvw segment `s` outside the replicated K and V rows (global_grad_norm).
  void add_unreplicated(SumOfSquares& squares, const float* grads, const OptimizerSegment& s) const;
  // Sums wte's gradient over the first and last stage (Megatron's tied-embedding all-reduce).
  void allreduce_tied_embedding();
  // Whether the embedding and the LM head, which share wte, are on different ranks.
  bool tied_across_stages() const;
  // zb-auto's memory limit: --max-in-flight, else P (1F1B's peak).
  int zb_auto_limit() const;
  // --rerun-suspect: whether this step's values call for a second computation.
  bool suspect_values(double loss, double norm) const;

  TrainOptions opts_;
  GPTConfig cfg_;
  std::unique_ptr<Grid> grid_;
  // --zero-group node: DP x CP split by node (ZeRO's shards) and across nodes (their replicas).
  std::unique_ptr<NodeSplit> zero_nodes_;
  ParallelGroups groups_;  // the grid's, as the model was built with them (model_builder.hpp)
  // mpiformer-eval's run: the model alone; grads_, the optimizer and the DP gradients stay empty.
  bool model_only_ = false;
  std::vector<PlacementRow> placement_;  // every rank's, on rank 0
  int local_batch_ = 0;                  // rows of the global batch on this DP rank
  int local_seq_len_ = 0;                // positions of each row on this CP rank: T / cp
  int doc_token_ = -1;                   // --doc-mask's document token; -1: no masking
  bool doc_token_after_ = false;         // it ends documents (EOS) instead of starting them
  int node_ranks_ = 1;                   // ranks on this rank's node
  MemoryPlan memory_;                    // predicted before anything was allocated
  LRSchedule schedule_;
  std::unique_ptr<DataLoader> train_data_, val_data_;
  std::string val_name_;
  std::optional<EvalTask> eval_task_;  // --eval-data
  TpShard shard_;
  Parameters params_, grads_;
  // --precision bf16: the parameters rounded to bf16, what the products read as weights; refreshed
  // after every update (derived state: checkpoints hold the fp32 parameters).
  Bf16Slab weights16_;
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<Muon> muon_;  // --optimizer muon: the blocks' matrices (AdamW keeps the rest)
  std::unique_ptr<SumOfSquares> grad_squares_;  // the gradient norm's, read once a step
  std::unique_ptr<DataParallelGrads> dp_grads_;
  // ZeRO-2/3 (optim/sharded_blocks.hpp): the blocks' gradients (and parameters) sharded.
  std::unique_ptr<ShardedBlocks> sharded_;
  bool zero3() const { return sharded_ && dp_grads_->stage() == 3; }
  std::unique_ptr<StateFiles> state_files_;
  int first_step_ = 1;       // 1, or the step after the resumed checkpoint's
  int64_t tokens_seen_ = 0;  // training tokens through the model so far, over the whole run
  std::optional<ResumePoint> resume_;
  std::string resumed_from_;   // "": resume_'s checkpoint; else the --save-local shards read
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
  BatchBuffers batch_;                      // this rank's share of the batch
  PeakRate peak_;                           // this rank's, for MFU: measured before the allocations
  std::optional<PeakTracker> peak_flops_;   // all ranks' together over the run, from peak_
  Tally tally_;
  int stop_signal_ = 0;  // agreed on by every rank; 0: go on
  // The run's phases and what observes them.
  StepPhases phases_;
  std::unique_ptr<Watchdog> watchdog_;
  std::unique_ptr<StepTrace> trace_;
  std::unique_ptr<PhaseTimers> timers_;
  std::optional<MetricsStart> metrics_start_;  // rank 0, with --metrics
  // The last --outlier-window losses and gradient norms (kept whether or not --skip-outliers is
  // on, so it may be turned on at a resume), and the updates skipped so far.
  OutlierWindow loss_window_{128}, norm_window_{128};
  int64_t skipped_updates_ = 0;
  TestFault test_fault_;  // MPIFORMER_TEST_FAULT, for the tests
  std::unique_ptr<RunSaver> saver_;
  std::unique_ptr<RunReporter> reporter_;  // made last: it opens --metrics and --tensorboard
};

// The threads a rank should use: `requested` if positive, else OMP_NUM_THREADS if set, else the
// cores this process may run on divided by the ranks on its node (at least 1). Rank 0 warns when
// the ranks' threads outnumber its node's cores.
int choose_threads(int requested, const NodePlacement& place, MPI_Comm world);

}  // namespace mpf
