#include "train/run_saver.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "checkpoint/checkpoint_dir.hpp"
#include "checkpoint/checkpointing.hpp"
#include "checkpoint/hf_checkpoint.hpp"
#include "checkpoint/llmc_checkpoint.hpp"
#include "checkpoint/writer.hpp"
#include "core/error.hpp"
#include "core/stopwatch.hpp"
#include "core/transfer.hpp"
#include "generate/tokenizer_file.hpp"
#include "io/output_file.hpp"
#include "layout/settings.hpp"
#include "parallel/agreement.hpp"
#include "train/run_reporter.hpp"
#include "train/test_fault.hpp"
#include "train/trainer.hpp"

namespace mpf {

bool RunSaver::save_llmc() const {
  const TrainingRun& r = run_;
  if (r.opts_.save_llmc.empty()) return true;
  const std::string error =
      save_model_file(*r.state_files_, r.grid_->world_comm(), r.opts_.save_llmc);
  if (r.is_root()) {
    if (error.empty()) {
      std::printf("saved %s\n", r.opts_.save_llmc.c_str());
    } else {
      print_error("--save-llmc %s", error.c_str());
    }
  }
  return error.empty();
}

bool RunSaver::save_hf() const {
  const TrainingRun& r = run_;
  if (r.opts_.save_hf.empty()) return true;
  const std::string error = save_hf_model(
      r.opts_.save_hf, *r.grid_, r.shard_, r.params_, parse_hf_dtype(r.opts_.save_hf_dtype),
      is_tokenizer_json(r.opts_.tokenizer) ? r.opts_.tokenizer : "");
  if (r.is_root()) {
    if (error.empty()) {
      std::printf("saved %s\n", r.opts_.save_hf.c_str());
    } else {
      print_error("--save-hf %s", error.c_str());
    }
  }
  return error.empty();
}

CheckpointInfo RunSaver::checkpoint_info(const TrainingRun& r, int step) {
  // The settings as this run resolved them: the layout, the validation data, the schedule's length.
  TrainOptions resolved = r.opts_;
  resolved.lr_decay_steps = r.schedule_.steps;
  resolved.val_data = r.val_name_;
  resolved.tp = r.grid_->tp_size();
  resolved.pp = r.grid_->pp_size();
  resolved.dp = r.grid_->dp_size();
  resolved.cp = r.grid_->cp_size();
  resolved.virtual_stages = r.shape_.virtual_stages;
  resolved.schedule = pipeline::schedule_name(r.pp_schedule_);
  resolved.microbatches = r.shape_.microbatches;
  resolved.pp_layout.clear();
  for (const LayerRange& range : r.layer_ranges_) {
    resolved.pp_layout += (resolved.pp_layout.empty() ? "" : ",") + std::to_string(range.size());
  }
  resolved.zero = r.dp_grads_->stage();

  CheckpointInfo c;
  c.step = step;
  c.model = r.cfg_;
  c.settings = saved_settings(resolved);
  c.train_data_tokens = r.train_data_->total_tokens();
  c.train_file = r.train_data_->position().file;
  c.train_position = r.train_data_->position().token;
  c.tokens_seen = r.tokens_seen_;
  c.loss_window = r.loss_window_.values();
  c.norm_window = r.norm_window_.values();
  c.skipped_updates = r.skipped_updates_;
  if (r.val_data_) {
    c.val_file = r.val_data_->position().file;
    c.val_position = r.val_data_->position().token;
  }
  return c;
}

// The background writer. MPI is initialised asking for MPI_THREAD_MULTIPLE (apps/runtime.cpp):
// where the library grants it, a thread of its own writes, every collective of it on `comm`
// (a duplicate of the world: the same ranks in the same order, and no message of it can match
// one of training's), and every rank's writer makes the same sequence of them (save_checkpoint's).
// Where the library grants less, the write is funnelled: the main thread writes the staged copy
// on `comm` at the save step itself (no overlap, but the same files and the same path).
struct RunSaver::Background {
  MPI_Comm comm = MPI_COMM_NULL;
  bool threaded = false;
  std::vector<float> slab, m, v;  // the staged copy of this rank's state
  std::thread writer;
  std::atomic<bool> done{false};
  int step = 0;  // the step being written; 0: none
  double stall = 0;
  SaveReport report;

  ~Background() {
    if (writer.joinable()) writer.join();
    if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  }
};

local_tier::ShardKey RunSaver::local_key(const TrainingRun& r) {
  local_tier::ShardKey key;
  key.save = resolved_path(r.opts_.save);
  key.rank = r.grid_->world_rank();
  key.slab = int64_t(r.params_.slab.extent(0));
  key.moments = int64_t(r.optimizer_->first_moment().extent(0));
  key.second_moments = int64_t(r.optimizer_->second_moment().extent(0));
  // The layout as the state file records it, and the model's shape: a shard is this rank's memory,
  // which only the same layout of the same model holds alike.
  int world = 1;
  MPI_Comm_size(r.grid_->world_comm(), &world);
  key.layout = "world = " + std::to_string(world) + "\n";
  for (const auto& [k, value] : checkpoint_info(r, 1).settings) {
    if (k.rfind("layout.", 0) == 0) key.layout += k + " = " + value + "\n";
  }
  // --zero-group node shards the moments otherwise (not recorded: the global files do not
  // depend on it).
  if (r.zero_nodes_) key.layout += "zero_group = node\n";
  // Muon's v holds AdamW's segments only (optim/adamw.hpp): its shards are another size.
  if (r.muon_) key.layout += "optimizer = muon\n";
  CheckpointInfo shape;
  shape.model = r.cfg_;
  std::istringstream lines(to_text(shape));
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("model.", 0) == 0) key.layout += line + "\n";
  }
  // Not this rank's own sizes (stages differ): every rank's shard is of one layout, and a shard
  // header's sizes are checked against the rank's.
  return key;
}

void RunSaver::check_local_dir(const TrainingRun& r) {
  const std::string& dir = r.opts_.save_local;
  if (dir.empty()) return;
  checkpoint::make_directories(dir);  // its markers go there; a failure shows at the first save
  const std::string shared = local_tier::check_node_local(r.grid_->world_comm(), dir, local_key(r),
                                                          checkpoint::this_process().host);
  if (!shared.empty()) throw InputError(shared);
}

void RunSaver::tidy_local_dir(const TrainingRun& r) {
  if (r.opts_.save_local.empty()) return;
  local_tier::remove_stale(r.opts_.save_local, local_key(r),
                           r.resumed_from_.empty() ? -1 : r.first_step_ - 1);
}

bool RunSaver::resume_local(TrainingRun& r) {
  const TrainOptions& o = r.opts_;
  // Only a run continuing its own --save directory from its newest checkpoint: --load-step or
  // another directory asks for that checkpoint, not for what this run did after it.
  if (o.save_local.empty() || !r.resume_ || o.load_step > 0 ||
      resolved_path(o.load) != resolved_path(o.save)) {
    return false;
  }
  const MPI_Comm world = r.grid_->world_comm();
  const local_tier::ShardKey key = local_key(r);
  const std::string global = checkpoint::path(r.resume_->root, r.resume_->info.step);
  Stopwatch clock;
  CheckpointInfo info;
  std::string line;
  const int64_t step = local_tier::choose_local_set(world, o.save_local, key, r.resume_->info.step,
                                                    global, info, line);
  if (!line.empty()) r.warnings_.push_back(line);
  if (step < 0) return false;
  std::string error = local_tier::read_shard(o.save_local, key, step, r.params_.slab.data(),
                                             r.optimizer_->first_moment().data(),
                                             r.optimizer_->second_moment().data());
  if (!error.empty())
    error = "rank " + std::to_string(key.rank) + "'s shard of step " + std::to_string(step) + " " +
            error;
  error = first_error(world, error);
  if (!error.empty()) {
    r.warnings_.push_back("the local shards in " + o.save_local + " are not used: " + error +
                          "; every rank resumes from the global checkpoint " + global);
    return false;
  }
  r.load_seconds_ = clock.seconds();
  r.resume_->info = info;
  r.train_data_->seek({info.train_file, info.train_position});
  r.resumed_from_ = "the local shards of step " + std::to_string(step) + " in " + o.save_local +
                    " (newer than " + global + ")";
  return true;
}

void RunSaver::save_local(int step) {
  TrainingRun& r = run_;
  const std::string& dir = r.opts_.save_local;
  const double bytes =
      double(local_key_.slab + local_key_.moments + local_key_.second_moments) * sizeof(float);
  PhaseScope phase(r.phases_, StepPhase::kSave, step, bytes / 20e6);
  Stopwatch clock;
  std::string error = checkpoint::make_directories(dir);
  if (error.empty()) {
    error = local_tier::write_shard(dir, local_key_, checkpoint_info(step), r.params_.slab.data(),
                                    r.optimizer_->first_moment().data(),
                                    r.optimizer_->second_moment().data());
  }
  if (!error.empty()) error = "rank " + std::to_string(local_key_.rank) + ": " + error;
  // A rank's older shard goes only once every rank's new one is complete: a restart must always
  // find a complete set.
  error = first_error(r.grid_->world_comm(), error);
  if (error.empty()) local_tier::remove_stale(dir, local_key_, step);
  if (error.empty() && step > newest_step_) {
    newest_ = "the local shards of step " + std::to_string(step) + " in " + dir;
    newest_step_ = step;
  }
  if (r.is_root()) {
    if (error.empty()) {
      std::printf(
          "checkpoint: saved the local shards of step %d to %s | %.3f GB a rank in %.2f s\n", step,
          dir.c_str(), bytes / 1e9, clock.seconds());
    } else {
      std::fprintf(stderr,
                   "warning: the local shards of step %d were not saved (%s); the newest complete "
                   "local set and the --save checkpoints are intact\n",
                   step, error.c_str());
    }
    std::fflush(stdout);
  }
}

RunSaver::RunSaver(TrainingRun& run, std::string newest) : run_(run), newest_(std::move(newest)) {
  const TrainingRun& r = run_;
  // Resumed from local shards: they are what a restart would take (`newest` names a global
  // checkpoint of their step, which does not exist).
  if (r.resume_) newest_step_ = int(r.resume_->info.step);
  if (!r.resumed_from_.empty()) newest_ = r.resumed_from_;
  if (!r.opts_.save_local.empty()) local_key_ = local_key(r);
  if (r.opts_.save.empty() || r.opts_.save_async == 0) return;
  background_ = std::make_unique<Background>();
  Background& b = *background_;
  MPF_MPI_CHECK(MPI_Comm_dup(r.grid_->world_comm(), &b.comm));
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  b.threaded = provided == MPI_THREAD_MULTIPLE;
  // Allocated (and touched) now: the memory plan counts them from the start.
  b.slab.assign(size_t(r.params_.slab.extent(0)), 0.0f);
  b.m.assign(size_t(r.optimizer_->first_moment().extent(0)), 0.0f);
  b.v.assign(size_t(r.optimizer_->second_moment().extent(0)), 0.0f);
}

RunSaver::~RunSaver() = default;

bool RunSaver::save(int step, bool now) {
  if (!background_) return save_now(step);
  if (now) {
    // Waiting for the write in flight is this save's time on the watchdog's clock (a save's
    // budget, from when the wait starts), not the step's stop agreement's.
    TrainingRun& r = run_;
    const double bytes = double(r.state_files_->model_bytes() + r.state_files_->optimizer_bytes());
    bool written = false;
    {
      PhaseScope phase(r.phases_, StepPhase::kSave, step, bytes / 20e6);
      written = finish_background();
    }
    return written & save_now(step);
  }
  return save_in_background(step);
}

bool RunSaver::save_now(int step) {
  TrainingRun& r = run_;
  // A save may take longer than a step: the watchdog gives it at least its size at 20 MB/s.
  const double bytes = double(r.state_files_->model_bytes() + r.state_files_->optimizer_bytes());
  PhaseScope phase(r.phases_, StepPhase::kSave, step, bytes / 20e6);
  StateFiles files = *r.state_files_;
  if (test_staging_failure_from_environment(step, r.grid_->world_rank())) {
    files.fail_staging_for_tests();
  }
  const SaveReport report = save_checkpoint(files, r.grid_->world_comm(), r.opts_.save,
                                            checkpoint_info(step), r.opts_.keep_last);
  return this->report(step, report, report.seconds, 0, false);
}

bool RunSaver::save_in_background(int step) {
  TrainingRun& r = run_;
  Background& b = *background_;
  const double bytes = double(r.state_files_->model_bytes() + r.state_files_->optimizer_bytes());
  PhaseScope phase(r.phases_, StepPhase::kSave, step, bytes / 20e6);
  // One save in flight: the last one must be complete before its buffer is overwritten.
  if (b.step != 0) {
    const int last = b.step;
    Stopwatch waiting;
    if (b.writer.joinable()) b.writer.join();
    b.step = 0;
    const double waited = waiting.seconds();
    if (r.is_root()) {
      std::printf(
          "checkpoint: step %d waited %.2f s for the save of step %d to finish (one save "
          "in flight at a time)\n",
          step, waited, last);
    }
    if (!report(last, b.report, b.stall, waited, true)) return false;
  }
  Stopwatch stall;
  copy_to_host(b.slab.data(), r.params_.slab.data(), b.slab.size() * sizeof(float),
               "d2h checkpoint staging");
  copy_to_host(b.m.data(), r.optimizer_->first_moment().data(), b.m.size() * sizeof(float),
               "d2h checkpoint staging");
  copy_to_host(b.v.data(), r.optimizer_->second_moment().data(), b.v.size() * sizeof(float),
               "d2h checkpoint staging");
  CheckpointInfo info = checkpoint_info(step);
  b.stall = stall.seconds();
  b.step = step;
  b.done = false;
  StateFiles files = r.state_files_->on_host_copy(b.comm, b.slab.data(), b.m.data(), b.v.data());
  if (test_staging_failure_from_environment(step, r.grid_->world_rank())) {
    files.fail_staging_for_tests();
  }
  const double delay = test_save_delay_from_environment(step);
  const bool fail = test_save_failure_from_environment(step, r.grid_->world_rank());
  auto write = [&b, files, info, root = r.opts_.save, keep = r.opts_.keep_last, delay, fail] {
    // Nothing may escape the writer thread (std::terminate): save_checkpoint turns a failure
    // between its collectives into the error every rank agrees on; one that escapes it anyway
    // is this rank's error (the others' writers may then wait in a collective: the watchdog's
    // --step-timeout times that wait at the next save or the end).
    try {
      b.report = save_checkpoint(files, b.comm, root, info, keep, [delay, fail] {
        if (delay > 0) std::this_thread::sleep_for(std::chrono::duration<double>(delay));
        if (fail) throw std::runtime_error("MPIFORMER_TEST_SAVE_FAIL: the writer thread threw");
      });
    } catch (const std::exception& e) {
      b.report = SaveReport{};
      b.report.error = std::string("the writer thread failed: ") + e.what();
    } catch (...) {
      b.report = SaveReport{};
      b.report.error = "the writer thread failed (an unknown exception)";
    }
    b.done = true;
  };
  if (r.is_root()) {
    std::printf("checkpoint: staged step %d in %.3f s (the step's stall); %s\n", step, b.stall,
                b.threaded ? "writing it in the background"
                           : "writing it now (MPI gives no MPI_THREAD_MULTIPLE: funnelled)");
    std::fflush(stdout);
  }
  if (b.threaded) {
    b.writer = std::thread(write);
  } else {
    write();
  }
  return true;
}

void RunSaver::poll() {
  // Ranks see their writers end at slightly different times: only a success is reported here. A
  // failure waits for the next save or the end, where every rank joins its writer and stops alike.
  if (!background_ || background_->step == 0 || !background_->done) return;
  if (background_->report.error.empty()) finish_background();
}

bool RunSaver::finish_background() {
  if (!background_ || background_->step == 0) return true;
  Background& b = *background_;
  Stopwatch waiting;
  if (b.writer.joinable()) b.writer.join();
  const int step = b.step;
  b.step = 0;
  return report(step, b.report, b.stall, waiting.seconds(), true);
}

bool RunSaver::report(int step, const SaveReport& report, double stall, double waited,
                      bool background) {
  TrainingRun& r = run_;
  if (r.is_root()) {
    for (const std::string& note : report.notes) std::printf("checkpoint: %s\n", note.c_str());
    if (report.error.empty()) {
      char overlap[48] = "";
      if (background) {
        std::snprintf(overlap, sizeof overlap, " | overlapped with training %.0f%%",
                      100 * RunReporter::save_overlap(report.seconds, waited, true));
      }
      std::printf("checkpoint: saved step %d to %s | %.2f GB in %.2f s = %.2f GB/s%s\n", step,
                  report.path.c_str(), report.bytes / 1e9, report.seconds,
                  report.bytes / 1e9 / report.seconds, overlap);
    } else {
      print_error(
          "saving the checkpoint of step %d failed: %s. Nothing of it is visible; "
          "%s",
          step, report.error.c_str(),
          newest_.empty() ? "there is no earlier checkpoint"
                          : (newest_ + " and " + r.opts_.save + "/latest are intact").c_str());
    }
    std::fflush(stdout);
  }
  r.reporter_->checkpoint(step, stall, report.seconds, waited, report.bytes, background,
                          report.error.empty());
  // A global save reported after newer local shards were written (it wrote in the background
  // meanwhile) is not what a restart takes.
  if (report.error.empty() && step >= newest_step_) {
    newest_ = report.path;
    newest_step_ = step;
  }
  return report.error.empty();
}

}  // namespace mpf
