// A run's inputs, resolved before anything is built: rank 0's decision where to start (the save
// directory's lock, the checkpoint --load resumes from), then every file and flag, checked. None
// of it calls MPI, so a rank that fails here never leaves the others waiting in a collective: the
// app agrees on the outcome (all_ranks_succeed) before it builds the run (trainer.hpp).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpointing.hpp"
#include "checkpoint/save_lock.hpp"
#include "data/loader.hpp"
#include "eval/task_file.hpp"
#include "io/llmc_tokenizer.hpp"
#include "layout/options.hpp"
#include "model/config.hpp"
#include "optim/lr_schedule.hpp"
#include "train/metrics_log.hpp"

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

// Everything a run reads from the user's files and flags, checked.
struct RunInputs {
  TrainOptions opts;  // as given, with a resumed run's settings taken from its checkpoint
  GPTConfig cfg;
  LRSchedule schedule;
  std::unique_ptr<DataLoader> train_data, val_data;
  std::string val_name;
  std::optional<ResumePoint> resume;         // --load found a checkpoint
  std::vector<std::string> notes, warnings;  // for rank 0 to print
  std::optional<Tokenizer> tokenizer;        // --tokenizer, for --sample-every
  int doc_token = -1;                        // --doc-mask: the token that marks documents
  bool doc_token_after = false;              // it ends each document (EOS) instead of starting it
  std::optional<MetricsStart> metrics;       // rank 0, with --metrics: what its file keeps
  std::optional<EvalTask> eval_task;         // --eval-data
  // mpiformer-eval: the model alone (its parameters and stage), no gradients or optimizer state.
  bool model_only = false;
};

// Throws InputError for any bad file or flag, or a checkpoint that cannot be resumed. `start`:
// rank 0's decision (decide_start), the same step on every rank. Rank 0 also checks that
// --save-llmc, --save-hf, --trace and --metrics can be written, and that --metrics (which may
// exist: it is appended to) is none of the files the run reads. `model_only` (mpiformer-eval):
// RunInputs::model_only, and no training or validation data is opened or checked.
RunInputs load_inputs(const TrainOptions& opts, const StartPoint& start, int world_rank,
                      bool model_only = false);

}  // namespace mpf
