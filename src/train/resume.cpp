#include "train/resume.hpp"

#include <cstdio>

#include "core/error.hpp"
#include "layout/model_options.hpp"
#include "layout/settings.hpp"

namespace mpf {

namespace {

// The saved text of `key`: the model's sizes from the checkpoint's model, the rest from its
// settings.
std::optional<std::string> saved_text(const CheckpointInfo& c, const std::string& key) {
  const GPTConfig& m = c.model;
  if (key == "model.layers") return std::to_string(m.layers);
  if (key == "model.heads") return std::to_string(m.heads);
  if (key == "model.channels") return std::to_string(m.channels);
  if (key == "model.vocab") return std::to_string(m.vocab);
  if (key == "model.max_seq_len") return std::to_string(m.max_seq_len);
  // A GPT-2 checkpoint has the Llama settings' defaults.
  const TrainOptions defaults;
  auto number = [](double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", x);
    return std::string(buf);
  };
  if (key == "model.arch") return std::string(arch_name(m.arch));
  if (key == "model.kv_heads") return std::to_string(m.llama() ? m.kv_head_count() : 0);
  if (key == "model.ffn_dim") return std::to_string(m.llama() ? m.ffn_width() : 0);
  if (key == "model.norm_eps") return number(m.llama() ? m.norm_eps : defaults.norm_eps);
  if (key == "model.rope_theta") return number(m.llama() ? m.rope_theta : defaults.rope_theta);
  if (key == "model.rope_scaling") return rope_scaling_text(m);
  if (key == "model.tied") return std::to_string(m.tied ? 1 : 0);
  if (key == "model.sliding_window") return std::to_string(m.sliding_window);
  if (key == "model.head_dim") return std::to_string(m.head_dim);
  if (key == "model.experts") return std::to_string(m.experts);
  if (key == "model.experts_per_token") return std::to_string(m.experts_per_token);
  if (key == "model.shared_ffn") return std::to_string(m.shared_ffn);
  if (key == "model.moe_renormalize") return std::to_string(m.moe() ? int(m.moe_renormalize) : -1);
  if (key == "model.mtp") return std::to_string(m.mtp);
  // Checkpoints written before there was a choice of optimizer are AdamW's.
  if (key == "optimizer.name") return setting(c, key).value_or("adamw");
  if (key == "optimizer.muon_momentum") return setting(c, key).value_or(number(0.95));
  if (key == "optimizer.muon_ns_precision") return setting(c, key).value_or("fp32");
  // Checkpoints written before multi-token prediction: its default weight.
  if (key == "optimizer.mtp_weight") return setting(c, key).value_or(number(0.3));
  return setting(c, key);
}

// The optimizer's own settings, which --reset-optimizer frees along with its state.
bool optimizer_state_setting(const std::string& flag) {
  return flag == "--optimizer" || flag == "--muon-momentum" || flag == "--beta1" ||
         flag == "--beta2" || flag == "--eps";
}

// The warnings of the settings that may change at a price (OnResume::warns).
void warn_about_changes(const TrainOptions& o, const TrainOptions& saved, const CheckpointInfo& c,
                        std::vector<std::string>& warnings) {
  if (o.batch != saved.batch || o.seq_len != saved.seq_len) {
    warnings.push_back("--batch " + std::to_string(o.batch) + " --seq-len " +
                       std::to_string(o.seq_len) + " differ from the checkpoint's " +
                       std::to_string(saved.batch) + " x " + std::to_string(saved.seq_len) +
                       ": the data continue at token " + std::to_string(c.train_position) +
                       " of training file " + std::to_string(c.train_file) + " (after " +
                       std::to_string(c.tokens_seen) +
                       " tokens trained on), in batches of the new shape, so the batches are "
                       "not those the saved run would have seen");
  }
  // The learning-rate schedule and the clipping (Megatron lets a resumed run override its
  // scheduler): a run that diverged resumes with a lower --lr. Each change is named, old and new.
  for (const SettingGroup& g : setting_groups()) {
    for (const Setting& s : g.rows) {
      const std::string flag = s.flag;
      if (s.on_resume != OnResume::warns || flag == "--batch" || flag == "--seq-len" ||
          flag == "--lr-decay-steps" || same_setting(o, saved, s)) {
        continue;  // the data's shape and the schedule's length have their own warnings below
      }
      warnings.push_back(flag + " " + setting_shown(o, s) + " differs from the checkpoint's " +
                         setting_shown(saved, s) + ": the resumed run uses " + setting_shown(o, s) +
                         " from step " + std::to_string(c.step + 1) + " on; pass " + flag + " " +
                         setting_shown(saved, s) + " to keep the saved run's");
    }
  }
  const int decay = o.lr_decay_steps > 0 ? o.lr_decay_steps : o.steps;
  if (decay != saved.lr_decay_steps && o.lr_schedule != "constant") {
    warnings.push_back("the learning rate now decays over " + std::to_string(decay) +
                       " steps (the saved run's schedule had " +
                       std::to_string(saved.lr_decay_steps) + "); pass --lr-decay-steps " +
                       std::to_string(saved.lr_decay_steps) + " to keep it");
  }
}

}  // namespace

void adopt_checkpoint_options(TrainOptions& o, const CheckpointInfo& c,
                              const std::string& state_file, std::vector<std::string>& warnings) {
  TrainOptions saved = o;
  for (const SettingGroup& g : setting_groups()) {
    for (const Setting& s : g.rows) {
      if (!s.key || s.on_resume == OnResume::not_saved || s.on_resume == OnResume::recorded) {
        continue;
      }
      const std::optional<std::string> text = saved_text(c, s.key);
      require(text.has_value(), "checkpoint " + state_file + ": field '" + s.key +
                                    "' is missing; the file is truncated or corrupt");
      try {
        set_setting(saved, s, s.key, *text);
      } catch (const InputError&) {
        throw InputError("checkpoint " + state_file + ": field '" + s.key + "' = '" + *text +
                         "' is malformed; the file is corrupt");
      }
      const bool given = o.given.count(s.flag) > 0;
      if (s.on_resume == OnResume::keep && given && o.reset_optimizer &&
          optimizer_state_setting(s.flag)) {
        continue;  // a fresh optimizer: its settings are the command line's
      }
      if (s.on_resume == OnResume::keep && std::string(s.flag) == "--optimizer") {
        require(!given || same_setting(o, saved, s),
                "--optimizer " + o.optimizer + " differs from checkpoint " + state_file +
                    "'s optimizer " + saved.optimizer +
                    ", whose state it cannot continue; pass --reset-optimizer to start the " +
                    o.optimizer + " state afresh, or drop --optimizer");
      }
      if (s.on_resume == OnResume::keep) {
        // Its saved value is only a default: "pass --kv-heads 0" would be refused in turn.
        require(!given || c.model.llama() || !is_llama_flag(s.flag),
                std::string(s.flag) + " is a Llama setting and checkpoint " + state_file +
                    " holds a GPT-2; drop " + s.flag);
        require(!given || same_setting(o, saved, s),
                std::string(s.flag) + " " + setting_shown(o, s) +
                    " differs from the checkpoint's " + setting_shown(saved, s) +
                    ", a setting the resumed run must keep; drop " + s.flag + " or pass " + s.flag +
                    " " + setting_shown(saved, s));
      }
      if (!given) std::visit([&](auto field) { o.*field = saved.*field; }, s.field);
    }
  }
  // A run saved without validation data resumes without it, not with the default.
  if (!o.given.count("--val-data") && o.val_data.empty()) o.val_data = "none";
  // The schedule's length follows a new --steps unless given itself.
  if (!o.given.count("--lr-decay-steps") && o.given.count("--steps")) o.lr_decay_steps = 0;
  warn_about_changes(o, saved, c, warnings);
}

}  // namespace mpf
