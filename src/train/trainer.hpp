// A training run: builds the model, data and optimizer from the options (or resumes one from a
// checkpoint), then runs the steps. Each step reads as its phases, each timed (docs/design.md,
// code style 9):
//   data -> zero grads -> forward -> backward -> DP grad sync -> grad norm / clip -> AdamW
// and ends at a boundary where the ranks agree whether to stop (a signal), and may save.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpointing.hpp"
#include "checkpoint/state_files.hpp"
#include "data/loader.hpp"
#include "generate/training_sample.hpp"
#include "model/activations.hpp"
#include "model/parameters.hpp"
#include "optim/adamw.hpp"
#include "optim/grad_buckets.hpp"
#include "optim/grad_norm.hpp"
#include "optim/lr_schedule.hpp"
#include "parallel/grid.hpp"
#include "parallel/node.hpp"
#include "pipeline/layer_ownership.hpp"
#include "pipeline/model_stage.hpp"
#include "pipeline/schedule.hpp"
#include "pipeline/schedule_plan.hpp"
#include "train/options.hpp"
#include "train/peak.hpp"
#include "train/watchdog.hpp"

namespace mpf {

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
};

// Throws InputError for any bad file or flag, or a checkpoint that cannot be resumed. Rank 0 also
// checks that --save-llmc and --trace can be written.
RunInputs load_inputs(const TrainOptions& opts, int world_rank);

struct TrainResult {
  std::vector<double> step_ms;  // each step's wall time (as rank 0 measured it)
  int status = 0;               // exit_status.hpp, the same on every rank
};

class TrainingRun {
 public:
  // Collective over `world`. Throws InputError, on every rank alike, if the layout does not fit
  // (the batch does not split over the data-parallel ranks) or a checkpoint or --init-from file
  // does not load (unreadable, corrupt, non-finite).
  TrainingRun(RunInputs inputs, MPI_Comm world);

  // Runs the steps up to opts.steps, logging on rank 0, saving as --save asks; writes
  // --save-llmc at the end. Stops early, with the status saying why, on a signal, a non-finite
  // loss or gradient norm (before that step's update), or a failed save.
  TrainResult train();

  // Mean per-token loss over the global batch, from this rank's sum (every rank gets it).
  double global_mean_loss(double local_sum) const;
  // The global gradient norm: split tensors summed over the TP ranks, replicated ones once.
  double global_grad_norm() const;

 private:
  void load_batch(DataLoader& loader);
  double validate();
  // Collective: --save's checkpoint after `step`; false (rank 0 has said why) if it failed.
  bool save(int step);
  CheckpointInfo checkpoint_info(int step) const;
  // Collective: --save-llmc; false if it failed.
  bool save_llmc() const;
  void print_banner(const PeakRate& peak) const;
  // The most elements a product's operand spans (the size of the bf16 scratch).
  int64_t largest_operand() const;
  // Collective: rank 0 prints each stage's peak activations and mean F/B/W times.
  void report_stages(const StageTimes& timed) const;
  // Collective: zb-auto's plan from step `step`'s measured op times (the steps before it run
  // zb-auto planned for F = B = W).
  void plan_zb_auto(int step);
  bool is_root() const { return grid_->world_rank() == 0; }
  // The part of the model TP rank t of pipeline stage p holds.
  TpShard stage_shard(int tp_rank, int pp_rank) const;
  // Sums wte's gradient over the first and last stage (Megatron's tied-embedding all-reduce).
  void allreduce_tied_embedding();
  // Whether the embedding and the LM head, which share wte, are on different ranks.
  bool tied_across_stages() const;
  // zb-auto's memory limit: --max-in-flight, else P (1F1B's peak).
  int zb_auto_limit() const;

  TrainOptions opts_;
  GPTConfig cfg_;
  std::unique_ptr<Grid> grid_;
  int local_batch_ = 0;  // rows of the global batch on this DP rank
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
  std::unique_ptr<Watchdog> watchdog_;
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
  Tokens batch_;                            // this DP rank's inputs, then its targets
  HostTokens host_batch_;                   // the same, where the loader fills them
  std::vector<Tokens> inputs_, targets_;    // per microbatch: views into batch_
};

// The threads a rank should use: `requested` if positive, else OMP_NUM_THREADS if set, else the
// cores this process may run on divided by the ranks on its node (at least 1). Rank 0 warns when
// the ranks' threads outnumber its node's cores.
int choose_threads(int requested, const NodePlacement& place, MPI_Comm world);

}  // namespace mpf
