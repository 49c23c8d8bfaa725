#include "layout/options.hpp"

#include <algorithm>
#include <functional>
#include <vector>

#include "backends/gemm.hpp"
#include "checkpoint/hf_checkpoint.hpp"
#include "core/error.hpp"
#include "core/flags.hpp"
#include "io/output_file.hpp"
#include "layout/model_options.hpp"
#include "layout/settings.hpp"
#include "model/layers/mma_attention.hpp"

namespace mpf {

using flags::number;

// The text wrapped at 100 columns under a 24-column indent.
std::string help_entry(const std::string& left, const std::string& text) {
  constexpr size_t kIndent = 24, kWidth = 100;
  std::string out = "  " + left;
  if (out.size() + 1 > kIndent) out += "\n";
  size_t column = out.back() == '\n' ? 0 : out.size();
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(start, end - start);
    if (column > kIndent && column + 1 + word.size() > kWidth) {
      out += "\n";
      column = 0;
    }
    if (column < kIndent) {
      out += std::string(kIndent - column, ' ');
      column = kIndent;
    } else {
      out += " ";
      ++column;
    }
    out += word;
    column += word.size();
    start = end + 1;
  }
  return out + "\n";
}

std::string help_row(const std::string& flag, const std::string& arg, std::string text,
                     const std::string& shown) {
  // A switch (no value) has no default to show.
  if (text.find("default") == std::string::npos && !arg.empty() && !shown.empty()) {
    text += " (default " + shown + ")";
  }
  return help_entry(flag + (arg.empty() ? "" : " ") + arg, text);
}

flags::Table settings_table(TrainOptions& o, const std::set<std::string>* only) {
  flags::Table table;
  for (const SettingGroup& g : setting_groups()) {
    for (const Setting& s : g.rows) {
      if (only && !only->count(s.flag)) continue;
      if (std::holds_alternative<bool TrainOptions::*>(s.field)) {
        table.switches[s.flag] = [&o, &s] { set_setting(o, s, s.flag, "true"); };
      } else {
        table.values[s.flag] = [&o, &s](const std::string& f, const std::string& v) {
          set_setting(o, s, f, v);
        };
        if (s.alone) table.alone[s.flag] = s.alone;
      }
    }
  }
  table.switches["--help"] = table.switches["-h"] = [&] { o.help = true; };
  return table;
}

TrainOptions parse_options(int argc, const char* const* argv) {
  TrainOptions o;
  // Kokkos consumes its own --kokkos-* flags in Kokkos::initialize.
  o.given = flags::parse(argc, argv, settings_table(o, nullptr), "mpiformer-train", "--kokkos-");
  check_options(o);
  return o;
}

namespace {

// --save-local: beside a global checkpoint, apart from it, written as often or more.
void check_local_tier_options(const TrainOptions& o) {
  const bool local = !o.save_local.empty();
  require(o.given.count("--save-local") == 0 || local,
          "--save-local needs a directory; pass --save-local DIR");
  require(o.given.count("--save-local-every") == 0 || local,
          "--save-local-every " + std::to_string(o.save_local_every) +
              " needs --save-local DIR to save into");
  if (!local) return;
  // A node's shards are lost with the node: only beside a checkpoint every node can read.
  require(!o.save.empty(), "--save-local " + o.save_local +
                               " needs --save DIR: a node's local shards are lost with the "
                               "node, and a restart elsewhere resumes from --save's checkpoints");
  require(o.save_local_every > 0, "--save-local " + o.save_local +
                                      " needs --save-local-every N, the steps between its shards");
  require(o.save_every == 0 || o.save_local_every <= o.save_every,
          "--save-local-every " + std::to_string(o.save_local_every) +
              " is less often than --save-every " + std::to_string(o.save_every) +
              ": the local tier is the frequent one; pass a --save-local-every of at most " +
              std::to_string(o.save_every));
  require(!path_within(o.save_local, o.save),
          "--save-local " + o.save_local + " is or lies inside --save " + o.save +
              ", which every node reads; pass a node-local directory apart from it, e.g. "
              "/tmp/$USER/run1");
}

// The checkpoint flags that need --save or --load beside them.
void check_checkpoint_options(const TrainOptions& o) {
  require(o.given.count("--save") == 0 || !o.save.empty(),
          "--save needs a directory; pass --save DIR");
  require(o.given.count("--load") == 0 || !o.load.empty(),
          "--load needs a directory; pass --load DIR");
  require(o.save_every == 0 || !o.save.empty(),
          "--save-every " + std::to_string(o.save_every) + " needs --save DIR to save into");
  require(o.save_async <= 1, "--save-async takes 0 or 1, got " + std::to_string(o.save_async));
  require(o.given.count("--save-async") == 0 || !o.save.empty(),
          "--save-async " + std::to_string(o.save_async) + " needs --save DIR");
  require(o.keep_last == 0 || !o.save.empty(),
          "--keep-last " + std::to_string(o.keep_last) + " needs --save DIR");
  require(o.load_step == 0 || !o.load.empty(),
          "--load-step " + std::to_string(o.load_step) + " needs --load DIR to load from");
  check_local_tier_options(o);
}

// Muon's settings (optim/muon.hpp).
void check_optimizer_options(const TrainOptions& o) {
  require(o.muon_momentum >= 0 && o.muon_momentum < 1,
          "--muon-momentum must be in [0, 1), got " + number(o.muon_momentum));
  require(
      o.optimizer == "muon" ||
          (o.given.count("--muon-momentum") == 0 && o.given.count("--muon-ns-precision") == 0),
      std::string(o.given.count("--muon-momentum") ? "--muon-momentum" : "--muon-ns-precision") +
          " sets Muon, and the optimizer is " + o.optimizer + "; pass --optimizer muon too");
  // Left out, --qk-clip is off; given, it is a bound (a resumed run's saved 0 is not given).
  require(o.given.count("--qk-clip") == 0 || o.qk_clip > 0.0f,
          "--qk-clip must be above 0, got " + number(o.qk_clip) +
              ": it is the largest attention logit a head may keep; leave it out for no clipping");
}

namespace {
// --zero 2 and 3 (optim/sharded_blocks.hpp) serve TP, SP, CP, PP (every schedule), EP and
// recomputation; the features that read or write a block's whole gradients or parameters
// outside the model's passes are refused by name.
void check_zero_options(TrainOptions& o) {
  if (o.zero < 2) return;
  const std::string z = "--zero " + std::to_string(o.zero);
  const std::string fix = "; use --zero 1";
  require(o.optimizer != "muon",
          z + " does not serve --optimizer muon yet (it reads whole gradient matrices)" + fix);
  require(!o.rerun_suspect,
          z + " does not serve --rerun-suspect (it compares each rank's whole gradients)" + fix);
  require(o.qk_clip <= 0.0f,
          z + " does not serve --qk-clip yet (it rescales whole weight rows)" + fix);
  require(o.moe_bias_update_rate <= 0.0f,
          z + " does not serve --moe-bias-update-rate yet (it moves whole routing biases)" + fix);
  if (o.zero < 3) return;
  // Under ZeRO-3 no rank holds the blocks' parameters whole between the passes.
  require(o.sample_every == 0,
          z + " does not serve --sample-every yet (generation reads whole blocks)" + fix);
  require(o.save_hf.empty(), z + " does not serve --save-hf yet (it writes whole tensors from "
                                 "each rank); save with --save-llmc, or use --zero 1");
  require(o.save_local.empty(),
          z + " does not serve --save-local yet (its shards copy the whole slab)" + fix);
  require(o.init_from.empty() || !is_hf_source(o.init_from),
          z + " does not serve --init-from a Hugging Face model yet" + fix);
  require(!(o.given.count("--save-async") && o.save_async == 1),
          z + " saves synchronously: --save-async 1 would stage a copy of every parameter; "
              "use --save-async 0");
  o.save_async = 0;
}
}  // namespace

}  // namespace

namespace {
// What needs bf16 products: the tensor-core attention (only in a CUDA build), bf16 messages.
void check_precision_options(const TrainOptions& o) {
  require(o.attention != "mma" || mma_attention_built(),
          "--attention mma runs on a GPU's tensor cores, and this build has no CUDA; use "
          "--attention fused or chunked");
  require(o.attention != "mma" || o.precision == Precision::bf16,
          "--attention mma computes in bf16; add --precision bf16, or use --attention fused");
  require(o.grad_reduce_dtype != "bf16" || o.precision == Precision::bf16,
          "--grad-reduce-dtype bf16 needs --precision bf16; add it, or reduce in fp32");
  require(o.grad_reduce_dtype != "bf16" || o.zero < 2,
          "--grad-reduce-dtype bf16 reduces the buckets of --zero 0 and 1, and ZeRO-" +
              std::to_string(o.zero) + "'s blocks are reduced in fp32; use --zero 1");
  require(o.zero_group != "node" || o.zero >= 1,
          "--zero-group node shards ZeRO's state within each node, and --zero " +
              std::to_string(o.zero) + " shards nothing; add --zero 1, 2 or 3, or drop it");
  require(o.zero_group != "node" || o.ep == 1,
          "--zero-group node does not serve expert parallelism yet (the experts' shards over "
          "the expert-DP group); use --zero-group all with --ep");
  require(o.zero_group != "node" || o.optimizer != "muon",
          "--zero-group node does not serve --optimizer muon yet (its matrices are dealt out "
          "over all DP x CP ranks); use --zero-group all or --optimizer adamw");
  require(o.p2p_dtype != "bf16" || o.precision == Precision::bf16,
          "--p2p-dtype bf16 needs --precision bf16; add it, or send in fp32");
  require(o.tp_comm_dtype != "bf16" || o.precision == Precision::bf16,
          "--tp-comm-dtype bf16 needs --precision bf16; add it, or run the TP collectives in "
          "fp32");
}
}  // namespace

void check_options(TrainOptions& o) {
  for (const SettingGroup& g : setting_groups()) {
    for (const Setting& s : g.rows) {
      if (s.key && std::string(s.key).rfind("model.", 0) == 0 && o.given.count(s.flag)) {
        o.model_flags_given += (o.model_flags_given.empty() ? "" : ", ") + std::string(s.flag);
      }
    }
  }
  check_precision_options(o);
  if (!o.gemm.empty()) {
    const std::vector<std::string> libraries = backend::available();
    std::string names;
    for (const std::string& l : libraries) names += (names.empty() ? "" : ", ") + l;
    require(std::find(libraries.begin(), libraries.end(), o.gemm) != libraries.end(),
            "--gemm " + o.gemm + " is not a GEMM library of this build; it has " + names);
  }

  // One spelling per value (8,1,4,8192 for 8.0,1,4,8192), as a checkpoint saves it: a resumed
  // run compares the text.
  if (o.given.count("--rope-scaling")) o.rope_scaling = canonical_rope_scaling(o.rope_scaling);
  require(o.given.count("--save-hf-dtype") == 0 || !o.save_hf.empty(),
          "--save-hf-dtype sets the dtype of --save-hf DIR; pass that too, or drop it");
  require(o.beta1 >= 0 && o.beta1 < 1, "--beta1 must be in [0, 1), got " + number(o.beta1));
  require(o.beta2 >= 0 && o.beta2 < 1, "--beta2 must be in [0, 1), got " + number(o.beta2));
  require(o.eps > 0, "--eps must be positive, got " + number(o.eps));
  require(o.final_lr_frac >= 0 && o.final_lr_frac <= 1,
          "--final-lr-frac must be in [0, 1], got " + number(o.final_lr_frac));
  require(o.microbatches == 0 || o.micro_batch_size == 0,
          "--microbatches and --micro-batch-size both set the microbatch count; give one");
  require(o.dp_bucket_mb > 0, "--dp-bucket-mb must be positive, got " + number(o.dp_bucket_mb));
  require(o.zero >= 0 && o.zero <= 3,
          "--zero " + std::to_string(o.zero) +
              " is not a ZeRO stage this trainer has; use 0, 1, 2 or 3");
  check_zero_options(o);
  check_optimizer_options(o);
  check_checkpoint_options(o);
  if (o.cp > 1) {
    const int chunks = 2 * o.cp;
    require(o.seq_len % chunks == 0,
            "--seq-len " + std::to_string(o.seq_len) + " does not split into 2 x --cp " +
                std::to_string(o.cp) + " = " + std::to_string(chunks) +
                " chunks (CP rank i holds chunks i and 2N-1-i of every sequence); use --seq-len " +
                nearest_multiples(o.seq_len, chunks));
  }
  require(o.doc_token >= 0 || o.given.count("--doc-token") == 0,
          "--doc-token " + std::to_string(o.doc_token) + " is not a token id; pass one >= 0");
  require(o.doc_token < 0 || o.doc_mask, "--doc-token " + std::to_string(o.doc_token) +
                                             " says where documents start for "
                                             "--doc-mask; pass --doc-mask too, or drop it");
  // The outputs apart from each other and from the checkpoint directory, by the paths the file
  // system resolves (not as spelt), before anything is created: a collision found at the end of
  // a run loses its output. --metrics against the inputs: load_inputs, once --data's globs are
  // resolved.
  check_outputs_apart({{"--save-llmc", o.save_llmc},
                       {"--save-hf", o.save_hf},
                       {"--trace", o.trace},
                       {"--metrics", o.metrics},
                       {"--tensorboard", o.tensorboard}},
                      o.save);
  require(!o.rerun_suspect || !o.overlap_grad_reduce,
          "--rerun-suspect compares each rank's gradients before they are reduced, and "
          "--overlap-grad-reduce reduces them during the backward; drop one of the two");
  require(
      o.skip_outliers > 0 || !o.given.count("--outlier-window"),
      "--outlier-window " + std::to_string(o.outlier_window) +
          " sets the steps --skip-outliers compares with, and it is off; pass --skip-outliers Z "
          "too, or drop --outlier-window");
  require(o.tokenizer.empty() || o.sample_every > 0 || !o.save_hf.empty() || !o.eval_data.empty(),
          "--tokenizer decodes the samples of --sample-every N, encodes a JSONL --eval-data and "
          "goes into --save-hf DIR; pass one of those too, or drop it");
  for (const char* flag : {"--eval-every", "--eval-examples"}) {
    require(!o.given.count(flag) || !o.eval_data.empty(),
            std::string(flag) + " applies to --eval-data FILE; pass that too, or drop it");
  }
}

std::string nearest_multiples(int n, int m) {
  const int below = n / m * m, above = below + m;
  return below > 0 ? std::to_string(below) + " or " + std::to_string(above) : std::to_string(above);
}

std::string settings_help(const std::set<std::string>* only) {
  std::string out;
  const TrainOptions defaults;
  for (const SettingGroup& g : setting_groups()) {
    std::string rows;
    for (const Setting& s : g.rows) {
      if (only && !only->count(s.flag)) continue;
      rows += help_row(s.flag, s.arg, s.help, setting_shown(defaults, s));
    }
    if (!rows.empty()) out += std::string(g.title) + "\n" + rows;
  }
  return out;
}

std::string usage() {
  std::string out =
      "usage: mpiexec -n N mpiformer-train [flags]\n\n"
      "Trains GPT-2 (llm.c's model) or a Llama (--arch llama) on N ranks = tp x cp x dp x pp\n"
      "(tensor, context, data and pipeline parallel). Flags take a value as `--flag V` or "
      "`--flag=V`.\n"
      "Defaults train a small byte-level GPT-2 on the built-in corpus.\n";
  out += settings_help(nullptr);
  out += help_entry("--help", "this text");
  out +=
      "SIGUSR1, SIGTERM or SIGINT (to any rank) finish the current step, save (with --save) and\n"
      "exit with status 3 (signals within 5 s of the first are the same request); a later\n"
      "one exits at once. Exit status: 0 done, 1 internal fault, 2 bad input or checkpoint,\n"
      "3 stopped by a signal, 4 diverged (non-finite loss or gradient norm: the update is not\n"
      "applied), 5 watchdog (--step-timeout), 6 a save failed (the previous checkpoint stays\n"
      "intact), 7 a step computed again gave a rank other gradients (--rerun-suspect),\n"
      "128+N a second stop signal N, or a step that did not end within its grace\n"
      "after the first, exited at once without saving (130 SIGINT, 138 SIGUSR1, 143 SIGTERM)\n";
  return out;
}

}  // namespace mpf
