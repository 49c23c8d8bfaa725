#include "train/run_inputs.hpp"

#include <cmath>
#include <cstdio>

#include "backends/gemm.hpp"
#include "checkpoint/checkpoint_dir.hpp"
#include "checkpoint/hf_checkpoint.hpp"
#include "checkpoint/hf_config.hpp"
#include "checkpoint/llmc_checkpoint.hpp"
#include "core/error.hpp"
#include "data/shard_manifest.hpp"
#include "eval/task_eval.hpp"
#include "generate/tokenizer_file.hpp"
#include "io/json.hpp"
#include "io/output_file.hpp"
#include "layout/model_options.hpp"
#include "layout/settings.hpp"
#include "train/resume.hpp"

namespace mpf {

namespace {

std::string default_val_data(const TrainOptions& o) {
  if (o.val_data == "none") return "";
  if (!o.val_data.empty()) return o.val_data;
  return o.data == "builtin:train" ? "builtin:val" : "";
}

// A resumed run takes its settings from the checkpoint (resume.cpp), and not --init-from.
void adopt_resume(RunInputs& in, const TrainOptions& given) {
  adopt_checkpoint_options(in.opts, in.resume->info,
                           checkpoint::state_file(in.resume->root, in.resume->info.step),
                           in.warnings);
  if (!given.init_from.empty()) {
    in.notes.push_back("--init-from " + given.init_from + " is not used: the run resumes from " +
                       checkpoint::path(in.resume->root, in.resume->info.step));
    in.opts.init_from.clear();
  }
}

void open_data(RunInputs& in) {
  const TrainOptions& opts = in.opts;
  const GPTConfig& cfg = in.cfg;
  in.schedule.kind = parse_schedule_kind(opts.lr_schedule);
  in.schedule.lr = opts.lr;
  in.schedule.warmup = opts.warmup;
  in.schedule.steps = opts.lr_decay_steps > 0 ? opts.lr_decay_steps : opts.steps;
  in.schedule.final_lr_frac = opts.final_lr_frac;
  // The model alone reads no data: a task's tokens are checked against its vocabulary instead
  // (read_eval_data), and --data's default, the built-in corpus, may not fit a small one.
  if (in.model_only) return;
  in.train_data = std::make_unique<DataLoader>(opts.data, opts.batch, opts.seq_len, cfg.vocab);
  in.val_name = default_val_data(opts);
  if (!in.val_name.empty()) {
    in.val_data = std::make_unique<DataLoader>(in.val_name, opts.batch, opts.seq_len, cfg.vocab);
  }
  if (!in.resume) return;
  // Validation restarts at the beginning of its stream each time (llm.c's rule), so only the
  // training stream's position matters.
  const CheckpointInfo& c = in.resume->info;
  in.train_data->seek({c.train_file, c.train_position});
  const std::string saved_data = setting(c, "data.train").value_or("");
  if (in.train_data->total_tokens() != c.train_data_tokens || opts.data != saved_data) {
    in.warnings.push_back("--data " + opts.data + " (" +
                          std::to_string(in.train_data->total_tokens()) +
                          " tokens) is not the checkpoint's " + saved_data + " (" +
                          std::to_string(c.train_data_tokens) +
                          " tokens): the run continues at the same file and token position");
  }
}

void read_sample_tokenizer(RunInputs& in) {
  const TrainOptions& opts = in.opts;
  if (opts.sample_every <= 0) return;
  require(opts.pp == 1,
          "--sample-every needs --pp 1: a pipeline stage holds only its blocks. "
          "Sample the saved model with mpiformer-generate (any layout loads it)");
  if (!opts.tokenizer.empty()) in.tokenizer = read_tokenizer_file(opts.tokenizer).decoder;
  require(!in.tokenizer || in.tokenizer->vocab() == in.cfg.vocab,
          "--tokenizer " + opts.tokenizer + " has " +
              std::to_string(in.tokenizer ? in.tokenizer->vocab() : 0) +
              " tokens but the model's vocabulary is " + std::to_string(in.cfg.vocab));
}

void find_doc_token(RunInputs& in) {
  const TrainOptions& opts = in.opts;
  if (!opts.doc_mask) return;
  std::optional<int> token;
  std::string from;
  // The data's own marking first (mpiformer-tokenize's manifest: before or after each document).
  std::optional<ManifestDocToken> marked;
  for (const std::string& manifest :
       opts.doc_token < 0 ? data_manifests(opts.data) : std::vector<std::string>{}) {
    if ((marked = read_manifest_doc_token(manifest))) {
      from = manifest + "'s doc_token " + json::quote(marked->text);
      break;
    }
  }
  if (opts.doc_token >= 0) {
    token = opts.doc_token;
    from = "--doc-token";
  } else if (marked) {
    token = marked->id;
    in.doc_token_after = marked->after;
  } else if (!opts.init_from.empty() && is_hf_source(opts.init_from) &&
             (token = hf_bos_token(opts.init_from))) {
    from = "config.json's bos_token_id";
  } else if ((token = known_bos_token(in.cfg))) {
    from = "the vocabulary's begin-of-document token";
  }
  require(token.has_value(),
          "--doc-mask needs the token that starts a document, and this model names none "
          "(no bos_token_id in a config.json, not GPT-2's or Llama 3's vocabulary): pass "
          "--doc-token ID");
  // Named by where it came from: a manifest's or a config.json's token is not --doc-token's.
  const std::string vocab = std::to_string(in.cfg.vocab);
  require(
      *token < in.cfg.vocab,
      (opts.doc_token >= 0 ? "--doc-token " + std::to_string(*token)
                           : "the document token " + std::to_string(*token) + " (" + from + ")") +
          " is outside the model's vocabulary of " + vocab + " tokens; pass --doc-token ID below " +
          vocab);
  in.doc_token = *token;
  in.notes.push_back("--doc-mask: a document " +
                     std::string(in.doc_token_after ? "ends at" : "starts at") + " each token " +
                     std::to_string(*token) + " (" + from + ")");
}

// --qk-clip scales the query and key projections; where normalisation or the latent attention
// stands between them and the logits, that scale would not reach the logits.
void check_qk_clip(const TrainOptions& opts, const GPTConfig& cfg) {
  if (opts.qk_clip <= 0.0f) return;
  require(!cfg.qk_norm(),
          "--qk-clip: this model's q/k norms already bound its attention logits "
          "(the scale of W_q and W_k does not reach them); drop --qk-clip");
  require(!cfg.mla(),
          "--qk-clip does not scale deepseek_v3's latent attention yet (its "
          "projections and shared rotary key); drop --qk-clip");
}

// --mtp: DeepSeek-V3's multi-token prediction modules, from its Hugging Face file (whose
// num_nextn_predict_layers is the default) or an llm.c file of this trainer's (its header's).
void apply_mtp(const TrainOptions& opts, GPTConfig& cfg) {
  const bool hf = !opts.init_from.empty() && is_hf_source(opts.init_from);
  const int held = hf ? hf_source_mtp_depth(opts.init_from) : cfg.mtp;
  if (opts.mtp < 0) {
    cfg.mtp = held;
    return;
  }
  require(opts.mtp == 0 || cfg.arch == Arch::kDeepseekV3,
          "--mtp " + std::to_string(opts.mtp) +
              " trains DeepSeek-V3's multi-token prediction modules; this model (" +
              arch_name(cfg.arch) + ") has none: drop --mtp, or --init-from a deepseek_v3 model");
  require(opts.mtp <= held,
          "--mtp " + std::to_string(opts.mtp) + ": " + opts.init_from + " holds " +
              std::to_string(held) +
              " multi-token prediction modules (config.json's num_nextn_predict_layers), and "
              "the others would have no weights; pass --mtp " +
              std::to_string(held) + " or less");
  cfg.mtp = opts.mtp;
}

// --moe-bias-update-rate moves a routing bias only DeepSeekMoE's noaux_tc routing reads.
void check_moe_bias_update(const TrainOptions& opts, const GPTConfig& cfg) {
  if (opts.moe_bias_update_rate <= 0.0f) return;
  require(cfg.features().moe_choice_bias && cfg.moe_noaux,
          "--moe-bias-update-rate moves the routing bias of deepseek_v3's DeepSeekMoE blocks "
          "(topk_method noaux_tc); this model has none: drop --moe-bias-update-rate");
  require(std::isfinite(opts.moe_bias_update_rate),
          "--moe-bias-update-rate must be a finite rate; pass e.g. 0.001");
}

void read_eval_data(RunInputs& in) {
  const TrainOptions& opts = in.opts;
  if (opts.eval_data.empty()) return;
  in.eval_task = read_eval_task(opts.eval_data, opts.tokenizer, opts.eval_examples);
  check_task_fits(*in.eval_task, opts.batch, opts.seq_len, in.cfg.vocab, "--batch", "--seq-len");
}

// Rank 0: the files the run will write can be written, and --save-hf's tokenizer fits the model.
void check_outputs(RunInputs& in) {
  const TrainOptions& opts = in.opts;
  if (!opts.save_llmc.empty()) check_checkpoint_writable(opts.save_llmc);
  if (!opts.save_hf.empty()) {
    check_hf_output(opts.save_hf);
    if (!opts.tokenizer.empty()) {
      // Read now, not found wanting at the end of the run: the copy must encode for the model.
      const int vocab = in.tokenizer ? in.tokenizer->vocab()
                                     : read_tokenizer_file(opts.tokenizer).decoder.vocab();
      if (!is_tokenizer_json(opts.tokenizer)) {
        in.notes.push_back("--tokenizer " + opts.tokenizer +
                           " is llm.c's tokenizer .bin, not a tokenizer.json: " + opts.save_hf +
                           " gets no tokenizer (pass mpiformer-generate a --tokenizer)");
      }
      require(!is_tokenizer_json(opts.tokenizer) || vocab <= in.cfg.vocab,
              "--tokenizer " + opts.tokenizer + " has " + std::to_string(vocab) +
                  " tokens but the model's vocabulary is " + std::to_string(in.cfg.vocab) +
                  "; raise --vocab or pass the data's tokenizer");
    }
  }
  if (!opts.trace.empty()) check_new_output(opts.trace, "--trace " + opts.trace);
  if (!opts.metrics.empty()) {
    // The only output that may exist already (it is appended to): never one of the run's inputs.
    std::vector<NamedOutput> inputs = {{"--eval-data", opts.eval_data},
                                       {"--init-from", opts.init_from},
                                       {"--tokenizer", opts.tokenizer}};
    if (in.train_data) {
      for (const TokenStream& f : in.train_data->files()) inputs.push_back({"--data", f.path()});
    }
    if (in.val_data) {
      for (const TokenStream& f : in.val_data->files()) inputs.push_back({"--val-data", f.path()});
    }
    check_outputs_not_inputs({{"--metrics", opts.metrics}}, inputs);
    in.metrics =
        plan_metrics(opts.metrics, in.resume ? int(in.resume->info.step) + 1 : 1, opts.save);
    if (!in.metrics->note.empty()) in.notes.push_back(in.metrics->note);
  }
}

}  // namespace

StartPoint decide_start(const TrainOptions& opts, std::optional<checkpoint::SaveLock>& lock) {
  StartPoint start;
  if (!opts.save.empty() && opts.dry_run) {
    // A dry run takes no lock and removes nothing: it says what a run would find.
    if (std::string lock = checkpoint::inspect_lock(opts.save); !lock.empty()) {
      start.notes.push_back("--save: " + lock);
    }
  } else if (!opts.save.empty()) {
    check_save_writable(opts.save);  // a refusal as clear as at the first save, but before it
    std::vector<std::string> notes;
    lock.emplace(opts.save, notes);
    const std::optional<checkpoint::Writer>& gone = lock->taken_over();
    for (const std::string& n :
         checkpoint::remove_dead_partials(lock->root(), gone ? &*gone : nullptr, false)) {
      notes.push_back(n);
    }
    // Now: an input error later must not hide that the lock was taken over or files removed.
    for (const std::string& n : notes) std::printf("note: %s\n", n.c_str());
    std::fflush(stdout);
  }
  start.resume_step = choose_checkpoint(opts.load, opts.load_step, start.notes);
  check_save_directory(opts.save, opts.load, start.resume_step >= 0 ? start.resume_step + 1 : 1);
  return start;
}

RunInputs load_inputs(const TrainOptions& given, const StartPoint& start, int world_rank,
                      bool model_only) {
  RunInputs in;
  in.model_only = model_only;
  in.opts = given;
  in.notes = start.notes;
  if (start.resume_step >= 0) in.resume = open_checkpoint(given.load, start.resume_step);
  if (in.resume) adopt_resume(in, given);
  const TrainOptions& opts = in.opts;
  if (opts.precision == Precision::bf16) {
    const std::string missing = backend::kernels().bf16_missing;
    require(missing.empty(), "--precision bf16 needs native bf16 products, but " + missing +
                                 "; use --precision fp32");
  }
  if (opts.optimizer == "muon" && opts.muon_ns_precision == "bf16") {
    const std::string missing = backend::kernels().bf16_missing;
    require(missing.empty(), "--muon-ns-precision bf16 needs native bf16 products, but " + missing +
                                 "; use --muon-ns-precision fp32");
  }
  if (!in.resume && opts.init_from.empty()) {
    // A fresh model holds the ids its tokenized data may hold.
    const std::string note = adopt_data_vocab(in.opts);
    if (!note.empty()) in.notes.push_back(note);
  }
  in.cfg = in.resume ? in.resume->info.model : model_config(opts);
  if (!in.resume) apply_mtp(opts, in.cfg);
  if (!in.resume && !opts.init_from.empty() && is_hf_source(opts.init_from)) {
    const std::string unused = hf_unused_biases(opts.init_from, in.cfg);
    if (!unused.empty()) in.warnings.push_back(unused);
    const std::string mtp = hf_unused_mtp(opts.init_from, in.cfg);
    if (!mtp.empty()) in.warnings.push_back(mtp);
  }
  apply_moe_aux_coef(opts, in.cfg);
  check_qk_clip(opts, in.cfg);
  check_moe_bias_update(opts, in.cfg);
  require(opts.seq_len <= in.cfg.max_seq_len,
          "--seq-len " + std::to_string(opts.seq_len) + " exceeds the model's max_seq_len " +
              std::to_string(in.cfg.max_seq_len) +
              "; use --seq-len <= " + std::to_string(in.cfg.max_seq_len) +
              (opts.init_from.empty() && !in.resume ? " or raise --max-seq-len" : ""));
  open_data(in);
  read_sample_tokenizer(in);
  find_doc_token(in);
  read_eval_data(in);
  // A finished run resumed again writes nothing: a job chain's later parts must end with 0.
  const bool complete = in.resume && in.resume->info.step >= opts.steps;
  if (!complete && world_rank == 0) check_outputs(in);
  // Every rank: each writes its shards on its own node.
  if (!complete && !opts.save_local.empty()) check_local_writable(opts.save_local);
  return in;
}

}  // namespace mpf
