#include "layout/model_options.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "checkpoint/hf_checkpoint.hpp"
#include "checkpoint/hf_config.hpp"
#include "checkpoint/llmc_checkpoint.hpp"
#include "core/error.hpp"
#include "core/flags.hpp"
#include "data/shard_manifest.hpp"
#include "io/output_file.hpp"

namespace mpf {

namespace {

// --rope-scaling FACTOR,LOW,HIGH,ORIGINAL into cfg (Llama 3.1's rope_scaling: 8,1,4,8192). Each
// field parsed whole and range-checked (sscanf's %d wrapped 4294967297 to 1).
void parse_rope_scaling(const std::string& text, GPTConfig& cfg) {
  if (text == "none") return;
  std::vector<std::string> fields;
  for (size_t begin = 0;;) {
    const size_t comma = text.find(',', begin);
    fields.push_back(text.substr(begin, comma - begin));
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  require(fields.size() == 4,
          "--rope-scaling '" + text +
              "' is not FACTOR,LOW_FREQ_FACTOR,HIGH_FREQ_FACTOR,ORIGINAL_MAX_POS; "
              "pass e.g. 8,1,4,8192 (Llama 3.1) or none");
  const std::string flag = "--rope-scaling";
  cfg.rope_factor = float(flags::to_double(flag, fields[0]));
  cfg.rope_low_freq_factor = float(flags::to_double(flag, fields[1]));
  cfg.rope_high_freq_factor = float(flags::to_double(flag, fields[2]));
  cfg.rope_original_max_pos = flags::to_int32(flag, fields[3]);
}

// The model flags not given take cfg's values: a flag given is then read against the model's own
// family (--moe-aux-coef on a Mixtral directory needs no --arch, --arch mixtral no --experts).
TrainOptions with_model_defaults(const TrainOptions& given, const GPTConfig& cfg) {
  TrainOptions o = given;
  // Another family's flags would be refused before the sizes are compared: name the family first.
  require(!given.given.count("--arch") || given.arch == arch_name(cfg.arch),
          "--arch " + given.arch + " disagrees with --init-from " + given.init_from +
              "'s model_type " + arch_name(cfg.arch) +
              "; drop --arch (the model's family comes from its config.json)");
  auto fill = [&](const char* flag, auto& field, auto value) {
    if (!given.given.count(flag)) field = value;
  };
  fill("--arch", o.arch, std::string(arch_name(cfg.arch)));
  fill("--layers", o.layers, cfg.layers);
  fill("--heads", o.heads, cfg.heads);
  fill("--dim", o.dim, cfg.channels);
  fill("--vocab", o.vocab, cfg.vocab);
  fill("--max-seq-len", o.max_seq_len, cfg.max_seq_len);
  if (!cfg.llama()) return o;
  fill("--kv-heads", o.kv_heads, cfg.kv_head_count());
  fill("--ffn-dim", o.ffn_dim, cfg.ffn_width());
  fill("--norm-eps", o.norm_eps, cfg.norm_eps);
  fill("--rope-theta", o.rope_theta, cfg.rope_theta);
  fill("--rope-scaling", o.rope_scaling, rope_scaling_text(cfg));
  fill("--tie-embeddings", o.tie_embeddings, cfg.tied ? 1 : 0);
  fill("--sliding-window", o.sliding_window, cfg.sliding_window);
  fill("--head-dim", o.head_dim, cfg.head_dim);
  if (!cfg.moe()) return o;
  fill("--experts", o.experts, cfg.experts);
  fill("--experts-per-token", o.experts_per_token, cfg.experts_per_token);
  fill("--moe-renormalize", o.moe_renormalize, cfg.moe_renormalize ? 1 : 0);
  fill("--shared-expert-dim", o.shared_expert_dim, cfg.shared_ffn);
  return o;
}

}  // namespace

// The manifest.json beside each .bin entry of --data (a path, a glob or a comma list of them),
// each directory once, in the order given.
std::vector<std::string> data_manifests(const std::string& data) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= data.size()) {
    size_t comma = data.find(',', start);
    if (comma == std::string::npos) comma = data.size();
    const std::string entry = data.substr(start, comma - start);
    start = comma + 1;
    if (entry.size() < 4 || entry.compare(entry.size() - 4, 4, ".bin") != 0) continue;
    const size_t slash = entry.rfind('/');
    const std::string manifest =
        (slash == std::string::npos ? "" : entry.substr(0, slash + 1)) + "manifest.json";
    if (std::find(out.begin(), out.end(), manifest) == out.end() && path_exists(manifest)) {
      out.push_back(manifest);
    }
  }
  return out;
}

std::string adopt_data_vocab(TrainOptions& o) {
  std::string source;
  int64_t vocab = 0;
  for (const std::string& manifest : data_manifests(o.data)) {
    const int64_t v = read_manifest_vocab_size(manifest);
    if (v > vocab) vocab = v, source = manifest;
  }
  if (source.empty()) return "";
  const std::string named = source + "'s tokenizer.vocab_size " + std::to_string(vocab);
  if (o.given.count("--vocab")) {
    require(o.vocab >= vocab, "--vocab " + std::to_string(o.vocab) + " is smaller than " + named +
                                  ": the shards may hold ids up to " + std::to_string(vocab - 1) +
                                  "; pass --vocab >= " + std::to_string(vocab) +
                                  ", or drop --vocab to take the manifest's");
    return "";
  }
  o.vocab = int(vocab);
  return "--vocab " + std::to_string(vocab) + ": " + named + " (the tokenizer of --data)";
}

bool is_llama_flag(const std::string& flag) {
  for (const char* f :
       {"--kv-heads", "--ffn-dim", "--norm-eps", "--rope-theta", "--rope-scaling",
        "--tie-embeddings", "--sliding-window", "--head-dim", "--experts", "--experts-per-token",
        "--moe-renormalize", "--moe-aux-coef", "--shared-expert-dim"}) {
    if (flag == f) return true;
  }
  return false;
}

std::string rope_scaling_text(const GPTConfig& cfg) {
  if (!cfg.llama() || cfg.rope_factor == 0) return "none";
  char buf[96];
  std::snprintf(buf, sizeof buf, "%g,%g,%g,%d", double(cfg.rope_factor),
                double(cfg.rope_low_freq_factor), double(cfg.rope_high_freq_factor),
                cfg.rope_original_max_pos);
  return buf;
}

std::string canonical_rope_scaling(const std::string& text) {
  GPTConfig cfg;
  cfg.arch = Arch::kLlama;
  parse_rope_scaling(text, cfg);
  return rope_scaling_text(cfg);
}

// The experts of a mixture-of-experts family: the flags' sizes, the family's gates (OLMoE's are the
// router's probabilities, Mixtral's and Qwen3-MoE's renormalised) unless --moe-renormalize says,
// and the family's balance coefficient (apply_moe_aux_coef: unless --moe-aux-coef says).
void set_experts(const TrainOptions& o, GPTConfig& cfg) {
  cfg.experts = o.experts;
  cfg.experts_per_token = o.experts_per_token;
  cfg.shared_ffn = o.shared_expert_dim;
  const bool moe = cfg.features().moe;
  require(moe || !o.given.count("--moe-renormalize"),
          "--moe-renormalize sets a mixture of experts; pass --arch mixtral, qwen3_moe or olmoe, "
          "or drop --moe-renormalize");
  require(o.moe_renormalize >= -1 && o.moe_renormalize <= 1,
          "--moe-renormalize is 0 or 1, got " + std::to_string(o.moe_renormalize));
  // Hugging Face's Mixtral always renormalises: a model that did not could not be saved as one.
  require(cfg.arch != Arch::kMixtral || o.moe_renormalize != 0,
          "Mixtral's gates are always renormalised (MixtralForCausalLM); drop --moe-renormalize 0 "
          "or pass --arch qwen3_moe or olmoe, whose norm_topk_prob says");
  cfg.moe_renormalize =
      moe && (o.moe_renormalize >= 0 ? o.moe_renormalize == 1 : default_moe_renormalize(cfg.arch));
  cfg.moe_aux_coef = moe ? default_moe_aux_coef(cfg.arch) : 0.0f;
}

// The shortest %g text that reads back as x (flags::to_double, then float).
std::string float_flag_text(float x) {
  char buf[32];
  for (int digits = 6; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, double(x));
    if (float(std::strtod(buf, nullptr)) == x) break;
  }
  return buf;
}

std::string model_flags(const GPTConfig& cfg) {
  auto n = [](const char* flag, int64_t v) {
    return std::string(" ") + flag + " " + std::to_string(v);
  };
  auto x = [](const char* flag, float v) {
    return std::string(" ") + flag + " " + float_flag_text(v);
  };
  std::string s = std::string("--arch ") + arch_name(cfg.arch) + n("--layers", cfg.layers) +
                  n("--heads", cfg.heads) + n("--dim", cfg.channels) + n("--vocab", cfg.vocab) +
                  n("--max-seq-len", cfg.max_seq_len);
  if (!cfg.llama()) return s;
  s += n("--kv-heads", cfg.kv_head_count()) + n("--ffn-dim", cfg.ffn_width()) +
       n("--tie-embeddings", cfg.tied ? 1 : 0);
  // The trainer's defaults left unsaid (TrainOptions).
  const TrainOptions defaults;
  if (cfg.norm_eps != defaults.norm_eps) s += x("--norm-eps", cfg.norm_eps);
  if (cfg.rope_theta != defaults.rope_theta) s += x("--rope-theta", cfg.rope_theta);
  if (cfg.rope_factor != 0 && !cfg.rope_yarn) s += " --rope-scaling " + rope_scaling_text(cfg);
  if (cfg.head_dim > 0) s += n("--head-dim", cfg.head_dim);
  if (cfg.sliding_window > 0) s += n("--sliding-window", cfg.sliding_window);
  if (cfg.moe()) {
    s += n("--experts", cfg.experts) + n("--experts-per-token", cfg.experts_per_token);
    if (cfg.moe_renormalize != default_moe_renormalize(cfg.arch)) {
      s += n("--moe-renormalize", cfg.moe_renormalize ? 1 : 0);
    }
  }
  if (cfg.shared_expert()) s += n("--shared-expert-dim", cfg.shared_ffn);
  return s;
}

bool flags_make_model(const GPTConfig& cfg) {
  std::vector<std::string> words{"mpiformer-train"};
  const std::string flags = model_flags(cfg);
  for (size_t begin = 0; begin < flags.size();) {
    size_t end = flags.find(' ', begin);
    if (end == std::string::npos) end = flags.size();
    if (end > begin) words.push_back(flags.substr(begin, end - begin));
    begin = end + 1;
  }
  std::vector<const char*> argv;
  for (const std::string& w : words) argv.push_back(w.c_str());
  GPTConfig made;
  try {
    made = model_config(parse_options(int(argv.size()), argv.data()));
  } catch (const InputError&) {
    return false;  // the trainer refuses the flags (deepseek_v3's latent attention)
  }
  // Neither a flag of the model: --mtp is the run's and the balance coefficient the loss's.
  made.mtp = cfg.mtp;
  made.moe_aux_coef = cfg.moe_aux_coef;
  // The shape a checkpoint is checked against, and every field a config.json holds as the
  // trainer would write it.
  return same_shape(made, cfg) && hf_config_json(made, safetensors::Dtype::kF32) ==
                                      hf_config_json(cfg, safetensors::Dtype::kF32);
}

GPTConfig flags_config(const TrainOptions& o) {
  GPTConfig cfg;
  cfg.layers = o.layers;
  cfg.heads = o.heads;
  cfg.channels = o.dim;
  cfg.vocab = o.vocab;
  cfg.max_seq_len = o.max_seq_len;
  cfg.padded_vocab = pad_vocab(o.vocab);
  require(parse_arch(o.arch, cfg.arch),
          "--arch " + o.arch + " is not a family this trainer runs; use one of " + arch_names());
  if (cfg.llama()) {
    cfg.kv_heads = o.kv_heads;
    cfg.ffn_dim = o.ffn_dim;
    cfg.norm_eps = o.norm_eps;
    cfg.rope_theta = o.rope_theta;
    cfg.tied = o.tie_embeddings != 0;
    cfg.sliding_window = o.sliding_window;
    if (o.head_dim > 0 && o.head_dim * o.heads != o.dim) cfg.head_dim = o.head_dim;
    parse_rope_scaling(o.rope_scaling, cfg);
    set_experts(o, cfg);
  } else {
    for (const std::string& flag : o.given) {
      require(!is_llama_flag(flag),
              flag + " is a Llama-family setting; pass --arch llama (or another family of " +
                  "Llama blocks), or drop " + flag);
    }
  }
  require(o.tie_embeddings == 0 || o.tie_embeddings == 1,
          "--tie-embeddings is 0 or 1, got " + std::to_string(o.tie_embeddings));
  validate(cfg, "flags");
  return cfg;
}

void apply_moe_aux_coef(const TrainOptions& o, GPTConfig& cfg) {
  if (!o.given.count("--moe-aux-coef") && o.moe_aux_coef < 0) return;  // the model's own
  require(cfg.moe(), "--moe-aux-coef sets a mixture of experts' balance loss; the model (" +
                         std::string(arch_name(cfg.arch)) + ") has none: drop --moe-aux-coef");
  require(o.moe_aux_coef >= 0 && std::isfinite(o.moe_aux_coef),
          "--moe-aux-coef must not be negative, got " + std::to_string(o.moe_aux_coef) +
              "; pass 0 for no balance loss");
  // The report's sequence-wise loss reads the sigmoid affinities normalised over each token's
  // experts; this one would read them raw: another loss, so none (HF's DeepseekV3 has none).
  require(!cfg.moe_sigmoid || o.moe_aux_coef == 0,
          "--moe-aux-coef: a balance loss over deepseek_v3's sigmoid scores (the report's, over "
          "affinities normalised per token) is not built yet; drop --moe-aux-coef (its "
          "balancing is --moe-bias-update-rate)");
  cfg.moe_aux_coef = o.moe_aux_coef;
}

GPTConfig model_config(const TrainOptions& o) {
  if (o.init_from.empty()) {
    GPTConfig cfg = flags_config(o);
    require(!cfg.features().mla,
            std::string("--arch ") + arch_name(cfg.arch) +
                "'s latent attention takes its sizes (kv_lora_rank, qk_nope_head_dim, ...) from "
                "a Hugging Face config.json, which no flag sets; pass --init-from a " +
                arch_name(cfg.arch) + " model directory");
    return cfg;
  }
  // A Hugging Face config.json rules and the flags given must agree with it; a bare .safetensors
  // file takes its sizes from the flags.
  if (is_hf_source(o.init_from)) {
    const std::optional<GPTConfig> file = hf_source_config(o.init_from);
    const GPTConfig flags = flags_config(file ? with_model_defaults(o, *file) : o);
    return read_hf_model_config(o.init_from, flags, o.given);
  }
  require(o.model_flags_given.empty(), "--init-from takes the model from the checkpoint " +
                                           o.init_from + "; drop " + o.model_flags_given +
                                           ", or drop --init-from to train a fresh model");
  return read_checkpoint_config(o.init_from);
}

}  // namespace mpf
