// A training run's saver: --save's checkpoints (the whole training state, collective MPI-IO),
// --save-llmc's llm.c model file and --save-hf's Hugging Face directory. Each save is collective
// and returns whether it succeeded; rank 0 says why when not (a failed save leaves the earlier
// checkpoints intact: checkpoint/checkpointing.hpp).
#pragma once

#include <string>

#include "checkpoint/checkpoint_info.hpp"

namespace mpf {

class TrainingRun;

class RunSaver {
 public:
  // Reads the run's state; `newest`: the checkpoint it resumed from ("" if none).
  RunSaver(TrainingRun& run, std::string newest) : run_(run), newest_(std::move(newest)) {}

  // --save's checkpoint after `step`.
  bool save(int step);
  bool save_llmc() const;
  bool save_hf() const;
  // The checkpoint saved or loaded last, for messages; "" if none.
  const std::string& newest() const { return newest_; }

 private:
  // The state file's contents: the settings as the run resolved them, the data's positions, the
  // outlier windows.
  CheckpointInfo checkpoint_info(int step) const;

  TrainingRun& run_;
  std::string newest_;
};

}  // namespace mpf
