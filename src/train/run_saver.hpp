// A training run's saver: --save's checkpoints (the whole training state, collective MPI-IO),
// --save-llmc's llm.c model file and --save-hf's Hugging Face directory. Each save is collective
// and returns whether it succeeded; rank 0 says why when not (a failed save leaves the earlier
// checkpoints intact: checkpoint/checkpointing.hpp).
//
// --save-async (the default with --save): at a save step each rank copies its shard of the state
// (parameters, AdamW's m and v; the state file's contents by value) into a host staging buffer
// and training goes on while a writer thread writes the copy, on a communicator of its own, as a
// synchronous save would (the same files, published the same way once every rank's write is
// complete). One save is in flight at a time: a save step that finds the last one still writing
// waits for it, and says how long. A stop signal and the end of the run wait for the write in
// flight and then save synchronously, so the process never exits with a write in flight.
//
// --save-local DIR (checkpoint/local_shards.hpp): every --save-local-every steps each rank writes
// its own shard into DIR on its node, on the main thread (a node-local write of one rank's part:
// it neither waits for nor delays the global write in flight), and removes its older one once
// every rank's new one is complete. A failed local write is a warning: the global saves go on.
#pragma once

#include <memory>
#include <string>

#include "checkpoint/checkpoint_info.hpp"
#include "checkpoint/local_shards.hpp"

namespace mpf {

class TrainingRun;
struct SaveReport;

class RunSaver {
 public:
  // Reads the run's state; `newest`: the checkpoint it resumed from ("" if none). Collective
  // with --save-async (the writer's communicator is made here).
  RunSaver(TrainingRun& run, std::string newest);
  ~RunSaver();  // waits for a write in flight

  // --save's checkpoint after `step`: staged and written in the background with --save-async,
  // unless `now` (a stop signal, the last step): then a write in flight is waited for and this
  // one written before returning.
  bool save(int step, bool now);
  // Reports a background write that has ended and succeeded, without waiting (not collective).
  void poll();
  // Waits for the background write in flight, if any, and reports it; false if it failed.
  bool finish_background();
  // Collective: this rank's --save-local shard of `step`. Never fails the run: a failure on any
  // rank is one warning, and the newest complete local set stays.
  void save_local(int step);
  // Collective, at set-up in place of the global checkpoint's load: resumes `run` from the newest
  // complete set of --save-local shards of its layout when it is newer than the checkpoint it
  // resumes from (checkpoint/local_shards.hpp), and says (a warning for rank 0) why not when a
  // rank lacks one. True if it did.
  static bool resume_local(TrainingRun& run);
  // Collective: refuses (InputError on every rank) a --save-local directory that ranks on
  // different hosts see as one (local_tier::check_node_local).
  static void check_local_dir(const TrainingRun& run);
  // Once the state is loaded: removes this rank's --save-local shards but the set it resumed from
  // (and the run's shards of other layouts). Those left are older than the state, of a set some
  // rank lacks, or of a history the run left (--load-step, --reset-optimizer): a later restart
  // must not go back to them.
  static void tidy_local_dir(const TrainingRun& run);
  bool save_llmc() const;
  bool save_hf() const;
  // The newest checkpoint a restart with --load would resume from, for messages: the global one
  // saved (published) or loaded last, or the --save-local shards written or resumed from last
  // when newer; "" if none.
  const std::string& newest() const { return newest_; }
  // newest(), once the background write in flight (if any) has ended and been reported: a run
  // that stops at once (diverged) names the checkpoint that write published. Collective.
  const std::string& newest_after_write() {
    finish_background();
    return newest_;
  }

 private:
  struct Background;

  // The state file's contents: the settings as the run resolved them, the data's positions, the
  // outlier windows.
  CheckpointInfo checkpoint_info(int step) const { return checkpoint_info(run_, step); }
  static CheckpointInfo checkpoint_info(const TrainingRun& run, int step);
  // What this rank's --save-local shards belong to: the run, its exact layout, the rank.
  static local_tier::ShardKey local_key(const TrainingRun& run);
  bool save_now(int step);
  bool save_in_background(int step);
  // Rank 0's lines about a save's outcome (and the --metrics record); updates newest_.
  bool report(int step, const SaveReport& r, double stall, double waited, bool background);

  TrainingRun& run_;
  std::string newest_;
  int newest_step_ = 0;                     // newest_'s step
  std::unique_ptr<Background> background_;  // with --save-async
  local_tier::ShardKey local_key_;          // with --save-local
};

}  // namespace mpf
