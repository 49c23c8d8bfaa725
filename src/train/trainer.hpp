// A training run: builds the model, data and optimizer from the options, then runs the steps.
// Each step reads as its phases, each timed (STYLE.md 9):
//   data -> zero grads -> forward -> backward -> DP grad sync -> grad norm / clip -> AdamW
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/loader.hpp"
#include "model/activations.hpp"
#include "model/parameters.hpp"
#include "optim/adamw.hpp"
#include "optim/lr_schedule.hpp"
#include "parallel/grad_buckets.hpp"
#include "parallel/grid.hpp"
#include "pipeline/layer_ownership.hpp"
#include "pipeline/model_stage.hpp"
#include "pipeline/schedule.hpp"
#include "train/options.hpp"

namespace mpf {

// Everything a run reads from the user's files and flags, checked. Loading involves no MPI call,
// so a rank that fails here never leaves the others waiting in a collective: the app agrees on
// the outcome (any_rank_failed) before building the run.
struct RunInputs {
  TrainOptions opts;
  GPTConfig cfg;
  LRSchedule schedule;
  std::unique_ptr<DataLoader> train_data, val_data;
  std::string val_name;
  std::vector<float> init_params;  // the --init-from checkpoint's parameters, else empty
};

// Throws InputError for any bad file or flag. Rank 0 also checks that --save-llmc can be written.
RunInputs load_inputs(const TrainOptions& opts, int world_rank);

class TrainingRun {
 public:
  // Collective over `world`. Throws InputError, on every rank alike, if the layout does not fit
  // (the batch does not split over the data-parallel ranks).
  TrainingRun(RunInputs inputs, MPI_Comm world);

  // Runs opts.steps steps, logging on rank 0; writes --save-llmc at the end. Returns each step's
  // wall time in milliseconds (as rank 0 measured it).
  std::vector<double> train();

  // Mean per-token loss over the global batch, from this rank's sum (every rank gets it).
  double global_mean_loss(double local_sum) const;
  // The global gradient norm: split tensors summed over the TP ranks, replicated ones once.
  double global_grad_norm() const;

 private:
  void load_batch(DataLoader& loader);
  double validate();
  void save_checkpoint() const;
  void print_banner(double peak_gflops) const;
  // Collective: rank 0 prints each stage's peak activations and mean F/B times.
  void report_stages(const double compute_ms[2], const int64_t compute_ops[2]) const;
  bool is_root() const { return grid_->world_rank() == 0; }
  // The part of the model TP rank t of pipeline stage p holds.
  TpShard stage_shard(int tp_rank, int pp_rank) const;
  // Sums wte's gradient over the first and last stage (Megatron's tied-embedding all-reduce).
  void allreduce_tied_embedding();

  TrainOptions opts_;
  GPTConfig cfg_;
  std::unique_ptr<Grid> grid_;
  int local_batch_ = 0;  // rows of the global batch on this DP rank
  LRSchedule schedule_;
  std::unique_ptr<DataLoader> train_data_, val_data_;
  std::string val_name_;
  TpShard shard_;
  Parameters params_, grads_;
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<DataParallelGrads> dp_grads_;
  int micro_batch_ = 0;  // rows of one microbatch
  pipeline::Schedule pp_schedule_ = pipeline::Schedule::kOneFOneB;
  pipeline::PipelineShape shape_;         // this rank's: P, its stage, V, M
  std::vector<LayerRange> layer_ranges_;  // blocks of every virtual stage
  std::unique_ptr<ModelStage> stage_;
  std::vector<Tokens> inputs_, targets_;  // per microbatch
  HostTokens host_inputs_, host_targets_;
};

// The threads a rank should use: `requested` if positive, else OMP_NUM_THREADS if set, else the
// cores this process may run on divided by the ranks on its node (at least 1). Collective.
int choose_threads(int requested, MPI_Comm world);

}  // namespace mpf
