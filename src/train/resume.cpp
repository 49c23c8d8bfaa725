#include "train/resume.hpp"

#include "core/error.hpp"
#include "core/flags.hpp"

namespace mpf {

void adopt_checkpoint_options(TrainOptions& o, const CheckpointInfo& c,
                              std::vector<std::string>& warnings) {
  using flags::number;
  auto given = [&](const char* flag) { return o.given.count(flag) > 0; };
  // A setting of the run being resumed: taken from the checkpoint, or refused if given otherwise.
  auto keep = [&](const char* flag, auto& value, const auto& saved, const std::string& shown,
                  const std::string& saved_shown) {
    require(!given(flag) || value == saved, std::string(flag) + " " + shown +
                                                " differs from the checkpoint's " + saved_shown +
                                                ", a setting the resumed run must keep; drop " +
                                                flag + " or pass " + flag + " " + saved_shown);
    value = saved;
  };
  auto keep_int = [&](const char* flag, int& value, int saved) {
    keep(flag, value, saved, std::to_string(value), std::to_string(saved));
  };
  auto keep_real = [&](const char* flag, float& value, float saved) {
    keep(flag, value, saved, number(value), number(saved));
  };
  const GPTConfig& m = c.model;
  keep_int("--layers", o.layers, m.layers);
  keep_int("--heads", o.heads, m.heads);
  keep_int("--dim", o.dim, m.channels);
  keep_int("--vocab", o.vocab, m.vocab);
  keep_int("--max-seq-len", o.max_seq_len, m.max_seq_len);
  keep("--seed", o.seed, c.seed, std::to_string(o.seed), std::to_string(c.seed));
  keep_real("--lr", o.lr, c.lr);
  keep_real("--beta1", o.beta1, c.beta1);
  keep_real("--beta2", o.beta2, c.beta2);
  keep_real("--eps", o.eps, c.eps);
  keep_real("--weight-decay", o.weight_decay, c.weight_decay);
  keep_real("--grad-clip", o.grad_clip, c.grad_clip);
  keep_int("--warmup", o.warmup, c.warmup);
  keep("--lr-schedule", o.lr_schedule, c.lr_schedule, o.lr_schedule, c.lr_schedule);
  keep_real("--final-lr-frac", o.final_lr_frac, c.final_lr_frac);

  // The batch shape may change: the data continue where the checkpoint's run would have.
  if (!given("--batch")) o.batch = c.batch;
  if (!given("--seq-len")) o.seq_len = c.seq_len;
  if (o.batch != c.batch || o.seq_len != c.seq_len) {
    warnings.push_back("--batch " + std::to_string(o.batch) + " --seq-len " +
                       std::to_string(o.seq_len) + " differ from the checkpoint's " +
                       std::to_string(c.batch) + " x " + std::to_string(c.seq_len) +
                       ": the data continue at token " + std::to_string(c.train_position) +
                       " of training file " + std::to_string(c.train_file) + " (after " +
                       std::to_string(c.tokens_seen) +
                       " tokens trained on), in batches of the new shape, so the batches are "
                       "not those the saved run would have seen");
  }
  if (!given("--steps")) o.steps = c.steps;
  // The data too: a resumed run reads where the saved one read.
  if (!given("--data")) o.data = c.train_data;
  if (!given("--val-data")) o.val_data = c.val_data.empty() ? "none" : c.val_data;
  // The schedule's length follows --steps unless given; a changed length is said.
  if (!given("--lr-decay-steps")) o.lr_decay_steps = given("--steps") ? 0 : c.lr_decay_steps;
  const int decay = o.lr_decay_steps > 0 ? o.lr_decay_steps : o.steps;
  if (decay != c.lr_decay_steps && o.lr_schedule != "constant") {
    warnings.push_back("the learning rate now decays over " + std::to_string(decay) +
                       " steps (the saved run's schedule had " + std::to_string(c.lr_decay_steps) +
                       "); pass --lr-decay-steps " + std::to_string(c.lr_decay_steps) +
                       " to keep it");
  }
}
}  // namespace mpf
