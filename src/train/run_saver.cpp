#include "train/run_saver.hpp"

#include <cstdio>

#include "checkpoint/checkpointing.hpp"
#include "checkpoint/hf_checkpoint.hpp"
#include "checkpoint/llmc_checkpoint.hpp"
#include "core/error.hpp"
#include "generate/tokenizer_file.hpp"
#include "train/settings.hpp"
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

CheckpointInfo RunSaver::checkpoint_info(int step) const {
  const TrainingRun& r = run_;
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
  resolved.zero = r.dp_grads_->zero() ? 1 : 0;

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

bool RunSaver::save(int step) {
  TrainingRun& r = run_;
  // A save may take longer than a step: the watchdog gives it at least its size at 20 MB/s.
  const double bytes = double(r.state_files_->model_bytes() + r.state_files_->optimizer_bytes());
  PhaseScope phase(r.phases_, StepPhase::kSave, step, bytes / 20e6);
  const SaveReport report = save_checkpoint(*r.state_files_, r.grid_->world_comm(), r.opts_.save,
                                            checkpoint_info(step), r.opts_.keep_last);
  if (r.is_root()) {
    for (const std::string& note : report.notes) std::printf("checkpoint: %s\n", note.c_str());
    if (report.error.empty()) {
      std::printf("checkpoint: saved step %d to %s | %.2f GB in %.2f s = %.2f GB/s\n", step,
                  report.path.c_str(), report.bytes / 1e9, report.seconds,
                  report.bytes / 1e9 / report.seconds);
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
  if (report.error.empty()) newest_ = report.path;
  return report.error.empty();
}

}  // namespace mpf
