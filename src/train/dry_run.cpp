// --dry-run: what a run would be, from a TrainingRun that stopped once its layout was checked
// (trainer.hpp). Everything here is read from that layout, the flags, the data files' sizes and
// the checkpoint's state file; nothing is allocated, loaded or written.
#include <cstdio>

#include "checkpoint/checkpoint_dir.hpp"
#include "pipeline/layer_ownership.hpp"
#include "train/exit_status.hpp"
#include "train/trainer.hpp"

namespace mpf {

namespace {

std::string plural(int64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::string data_text(const DataLoader& data, const std::string& name) {
  return name + " (" + plural(int64_t(data.files().size()), "file", "files") + ", " +
         std::to_string(data.total_tokens()) + " tokens)";
}

}  // namespace

int TrainingRun::dry_run() const {
  if (!is_root()) return kExitDone;
  for (const std::string& w : warnings_) std::fprintf(stderr, "warning: %s\n", w.c_str());
  for (const std::string& n : notes_) std::printf("note: %s\n", n.c_str());
  std::printf("grid: %s", describe_placement(*grid_, placement_, true).c_str());

  std::string start = opts_.init_from.empty() ? "fresh, seed " + std::to_string(opts_.seed)
                                              : "from " + opts_.init_from;
  const int64_t first = resume_ ? resume_->info.step + 1 : 1;
  if (resume_) {
    const CheckpointInfo& c = resume_->info;
    auto saved = [&](const char* key) { return setting(c, key).value_or("?"); };
    start = "resumes from " + checkpoint::path(resume_->root, c.step) + " (step " +
            std::to_string(c.step) + ", saved by tp " + saved("layout.tp") +
            (saved("layout.cp") != "?" && saved("layout.cp") != "1" ? " x cp " + saved("layout.cp")
                                                                    : std::string()) +
            " x dp " + saved("layout.dp") + " x pp " + saved("layout.pp") +
            "; its state file read, its " + "weights not)";
  }
  std::printf("dry run: model %s, %.2fM parameters, %s\n", describe(cfg_).c_str(),
              parameter_count(cfg_) / 1e6, start.c_str());

  const int nodes = int(node_summaries(placement_).size());
  std::string layout =
      "tp " + std::to_string(grid_->tp_size()) +
      (grid_->cp_size() > 1 ? " x cp " + std::to_string(grid_->cp_size()) : std::string()) +
      " x dp " + std::to_string(grid_->dp_size()) +
      (grid_->ep_size() > 1 ? " (ep " + std::to_string(grid_->ep_size()) + ")" : std::string()) +
      " x pp " + std::to_string(grid_->pp_size()) + " on " +
      plural(grid_->world_size(), "rank", "ranks") + ", " + plural(nodes, "node", "nodes") +
      "; schedule " + pipeline::schedule_name(pp_schedule_) + ", " +
      plural(shape_.microbatches, "microbatch", "microbatches") + " of " +
      plural(micro_batch_, "row", "rows") + " per DP rank";
  if (grid_->pp_size() > 1 || shape_.virtual_stages > 1) {
    layout += "; " + describe_layout(layer_ranges_, grid_->pp_size(), shape_.placement);
  }
  if (opts_.sequence_parallel) layout += "; sequence parallel";
  if (opts_.recompute != "none") layout += "; " + opts_.recompute + " recomputation";
  if (opts_.zero >= 1 && grid_->dp_cp_size() > 1) layout += "; ZeRO-" + std::to_string(opts_.zero);
  if (doc_token_ >= 0) layout += "; document masking (token " + std::to_string(doc_token_) + ")";
  std::printf("dry run: layout %s\n", layout.c_str());

  std::string run = first > opts_.steps
                        ? "complete at step " + std::to_string(first - 1) + " of --steps " +
                              std::to_string(opts_.steps) + ": nothing to train"
                        : "steps " + std::to_string(first) + " to " + std::to_string(opts_.steps);
  run += ", batch " + std::to_string(opts_.batch) + " x " + std::to_string(opts_.seq_len) +
         " tokens; data " + data_text(*train_data_, opts_.data);
  if (val_data_) run += ", validation " + data_text(*val_data_, val_name_);
  std::printf("dry run: %s\n", run.c_str());
  if (!opts_.save.empty()) {
    std::printf("dry run: checkpoints into %s%s at the end\n", opts_.save.c_str(),
                opts_.save_every > 0
                    ? (" every " + std::to_string(opts_.save_every) + " steps and").c_str()
                    : "");
    if (!opts_.save_local.empty()) {
      // The local tier is chosen when the state is loaded, which a dry run does not do.
      std::printf(
          "dry run: each rank's shard into %s on its node every %d steps; a run resumes from "
          "them where every rank holds a set of this layout newer than the checkpoint above\n",
          opts_.save_local.c_str(), opts_.save_local_every);
    }
  }
  std::printf("dry run: memory/rank (rank 0): %s\n", memory_.summary().c_str());
  std::printf("dry run: the layout fits; nothing was loaded, initialised or written\n");
  std::fflush(stdout);
  return kExitDone;
}

}  // namespace mpf
