#include "checkpoint/hf_config.hpp"

#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>

#include "core/error.hpp"
#include "io/input_file.hpp"
#include "io/json.hpp"

namespace mpf {

namespace {

struct SpecialIds {
  int bos, eos;
};

// Where the vocabulary is a known tokenizer's: GPT-2's <|endoftext|> (the last of its 50257 ids)
// begins and ends a text; Llama 3's 128256 ids have <|begin_of_text|> 128000 and
// <|end_of_text|> 128001.
std::optional<SpecialIds> special_ids(const GPTConfig& cfg) {
  if (!cfg.llama() && cfg.vocab == 50257) return SpecialIds{50256, 50256};
  if (cfg.llama() && cfg.vocab == 128256) return SpecialIds{128000, 128001};
  return std::nullopt;
}

std::string read_config_text(const std::string& path) {
  return read_input_text(path, "config " + path, "the model's config.json", 100'000'000);
}

// A JSON number as written: 1000000000000, not -1 or 1e+12 cut to an int.
std::string json_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// The config's keys, each read with its file and key named in every error.
class ConfigKeys {
 public:
  ConfigKeys(const json::Value& root, std::string path) : root_(root), path_(std::move(path)) {}

  const json::Value* find(const char* key) const { return root_.find(key); }
  std::string where(const char* key) const { return "config " + path_ + ": " + key; }

  int size(const char* key) const {
    const json::Value* v = find(key);
    require(v != nullptr, where(key) + " is missing; the model's shape needs it");
    require(v->is_number() && v->number() == std::floor(v->number()),
            where(key) + " is not an integer; the config is corrupt");
    const double n = v->number();
    require(n > 0, where(key) + " is " + json_number(n) + ", not positive; the config is corrupt");
    require(n < double(int64_t(1) << 31), where(key) + " is " + json_number(n) +
                                              ", more than this trainer takes (below 2^31); the "
                                              "config is corrupt or not a model's");
    return int(n);
  }
  int size_or(const char* key, int fallback) const {
    const json::Value* v = find(key);
    return v == nullptr || v->is_null() ? fallback : size(key);
  }
  double number_or(const char* key, double fallback) const {
    const json::Value* v = find(key);
    if (v == nullptr || v->is_null()) return fallback;
    require(v->is_number(), where(key) + " is not a number; the config is corrupt");
    return v->number();
  }
  bool bool_or(const char* key, bool fallback) const {
    const json::Value* v = find(key);
    if (v == nullptr || v->is_null()) return fallback;
    require(v->is_bool(), where(key) + " is not true or false; the config is corrupt");
    return v->boolean();
  }
  // The key, which may be absent, must be `expected` (a setting this trainer computes).
  void expect_string(const char* key, std::initializer_list<const char*> allowed,
                     const std::string& why) const {
    const json::Value* v = find(key);
    if (v == nullptr || v->is_null()) return;
    require(v->is_string(), where(key) + " is not a string; the config is corrupt");
    for (const char* a : allowed) {
      if (v->string() == a) return;
    }
    throw InputError(where(key) + " is \"" + v->string() + "\"; " + why);
  }
  void expect_bool(const char* key, bool expected, const std::string& why) const {
    const json::Value* v = find(key);
    if (v == nullptr || v->is_null()) return;
    require(v->is_bool(), where(key) + " is not true or false; the config is corrupt");
    require(v->boolean() == expected,
            where(key) + " is " + (v->boolean() ? "true" : "false") + "; " + why);
  }
  void expect_number(const char* key, double expected, const std::string& why) const {
    const json::Value* v = find(key);
    if (v == nullptr || v->is_null()) return;
    require(v->is_number(), where(key) + " is not a number; the config is corrupt");
    // A float32 of the value written as a decimal reads back within its rounding.
    require(std::fabs(v->number() - expected) <= 1e-6 * std::fabs(expected),
            where(key) + " is " + json::quote(std::to_string(v->number())) + "; " + why);
  }

 private:
  const json::Value& root_;
  std::string path_;
};

GPTConfig read_gpt2(const ConfigKeys& k) {
  GPTConfig cfg;
  cfg.layers = k.size("n_layer");
  cfg.heads = k.size("n_head");
  cfg.channels = k.size("n_embd");
  cfg.vocab = k.size("vocab_size");
  cfg.max_seq_len = k.size("n_positions");
  cfg.padded_vocab = pad_vocab(cfg.vocab);
  k.expect_string("activation_function", {"gelu_new", "gelu_pytorch_tanh"},
                  "this trainer's GPT-2 uses GELU's tanh approximation (gelu_new)");
  k.expect_number("layer_norm_epsilon", 1e-5, "this trainer's LayerNorm uses GPT-2's 1e-5");
  k.expect_bool("tie_word_embeddings", true,
                "this trainer's GPT-2 ties its LM head to the token embedding");
  k.expect_bool("scale_attn_weights", true,
                "this trainer scales attention scores by 1/sqrt(head size)");
  k.expect_bool("scale_attn_by_inverse_layer_idx", false,
                "this trainer does not scale attention by the layer index");
  if (const json::Value* inner = k.find("n_inner"); inner && !inner->is_null()) {
    require(inner->is_number() && inner->number() == 4.0 * cfg.channels,
            k.where("n_inner") + " is not 4 * n_embd (" + std::to_string(4 * cfg.channels) +
                "); this trainer's MLP is 4 times the width");
  }
  return cfg;
}

// A key this trainer does not compute must be absent, null or the value that changes nothing;
// anything else is refused by name rather than silently trained as another model.
void refuse_unimplemented(const ConfigKeys& k) {
  k.expect_string("hidden_act", {"silu"}, "this trainer's MLP is SwiGLU (silu)");
  k.expect_bool("mlp_bias", false, "this trainer's Llama-family MLPs have no biases");
  // Other families' switches for q/k norms: this trainer's come with the family (qwen3, olmo2).
  k.expect_bool("use_qk_norm", false, "this family has no q/k norms here; qwen3, olmo2, olmoe do");
  k.expect_bool("qk_layernorm", false, "this family has no q/k norms here; qwen3, olmo2, olmoe do");
  k.expect_number("partial_rotary_factor", 1.0, "this trainer rotates the whole head");
  for (const char* key :
       {"final_logit_softcapping", "attn_logit_softcapping", "embedding_multiplier",
        "logits_scaling", "residual_multiplier", "attention_multiplier", "query_pre_attn_scalar"}) {
    const json::Value* v = k.find(key);
    require(v == nullptr || v->is_null(),
            k.where(key) +
                " is set; this trainer does not compute it, so the model would not be "
                "the config's");
  }
}

// The sliding window: null (none), or a size (a window as long as the context is none).
int read_window(const ConfigKeys& k, int max_seq_len) {
  const int window = k.size_or("sliding_window", 0);
  return window >= max_seq_len ? 0 : window;
}

// A mixture of experts' keys: MixtralConfig's num_local_experts, Qwen3MoeConfig's and
// OlmoeConfig's num_experts, the expert width (Qwen3-MoE's moe_intermediate_size), top-k, the
// gates' renormalisation (Mixtral always; the others' norm_topk_prob) and the balance loss's
// coefficient; what would make some layers dense or the router noisy is refused.
void read_experts(const ConfigKeys& k, GPTConfig& cfg) {
  const bool mixtral = cfg.arch == Arch::kMixtral;
  cfg.experts = k.size(mixtral ? "num_local_experts" : "num_experts");
  cfg.experts_per_token = k.size("num_experts_per_tok");
  if (cfg.arch == Arch::kQwen3Moe || cfg.arch == Arch::kQwen2Moe) {
    cfg.ffn_dim = k.size("moe_intermediate_size");
    k.expect_number("decoder_sparse_step", 1.0, "this trainer's every block is a mixture");
    const json::Value* dense = k.find("mlp_only_layers");
    require(dense == nullptr || dense->is_null() || (dense->is_array() && dense->array().empty()),
            k.where("mlp_only_layers") +
                " names dense layers; this trainer's every block is a "
                "mixture of experts");
  }
  // Qwen2-MoE's shared expert (shared_expert_intermediate_size), gated by shared_expert_gate; and
  // its qkv_bias (default true): false builds the attention without biases, whatever the file
  // holds.
  if (cfg.arch == Arch::kQwen2Moe) {
    cfg.shared_ffn = k.size("shared_expert_intermediate_size");
    cfg.no_qkv_bias = !k.bool_or("qkv_bias", true);
  }
  cfg.moe_renormalize = mixtral || k.bool_or("norm_topk_prob", false);
  cfg.moe_aux_coef = float(k.number_or("router_aux_loss_coef", default_moe_aux_coef(cfg.arch)));
  k.expect_number("router_jitter_noise", 0.0, "this trainer's router has no noise");
  const json::Value* clip = k.find("clip_qkv");
  require(clip == nullptr || clip->is_null(),
          k.where("clip_qkv") + " is set; this trainer does not clip Q, K and V");
}

// DeepSeekMoE's blocks (DeepseekV3MoE): n_routed_experts SwiGLU experts of moe_intermediate_size,
// n_shared_experts as one ungated SwiGLU of n_shared · that width, the routing of
// DeepseekV3TopkRouter (model/config.hpp's moe_sigmoid..moe_scale). What it does not compute is
// refused by key.
void read_deepseek_moe(const ConfigKeys& k, GPTConfig& cfg) {
  cfg.experts = k.size("n_routed_experts");
  cfg.experts_per_token = k.size("num_experts_per_tok");
  cfg.ffn_dim = k.size("moe_intermediate_size");
  cfg.shared_ffn = k.size_or("n_shared_experts", 0) * cfg.ffn_dim;
  cfg.moe_renormalize = k.bool_or("norm_topk_prob", true);
  cfg.moe_scale = float(k.number_or("routed_scaling_factor", 1.0));
  require(cfg.moe_scale > 0 && std::isfinite(cfg.moe_scale),
          k.where("routed_scaling_factor") + " is not a positive number; the config is corrupt");
  k.expect_string("scoring_func", {"sigmoid", "softmax"},
                  "this trainer scores experts by their sigmoid or softmax only");
  const json::Value* scoring = k.find("scoring_func");
  cfg.moe_sigmoid = scoring == nullptr || scoring->is_null() || scoring->string() == "sigmoid";
  // aux_loss_alpha (DeepSeek's sequence-wise loss) over sigmoid scores normalised per token is
  // not built (transformers' DeepseekV3 computes no balance loss either): 0 there, read for
  // softmax scores, where this trainer's loss is DeepSeek-V2's.
  cfg.moe_aux_coef =
      cfg.moe_sigmoid ? 0.0f : float(k.number_or("aux_loss_alpha", default_moe_aux_coef(cfg.arch)));
  k.expect_string("topk_method", {"noaux_tc", "greedy"},
                  "this trainer chooses experts by noaux_tc (biased scores, group-limited) or "
                  "greedy (the scores alone) only");
  const json::Value* method = k.find("topk_method");
  cfg.moe_noaux = method == nullptr || method->is_null() || method->string() == "noaux_tc";
  cfg.moe_groups = k.size_or("n_group", 1);
  cfg.moe_topk_groups = k.size_or("topk_group", 1);
  const int E = cfg.experts, G = cfg.moe_groups, kg = cfg.moe_topk_groups;
  require(E % G == 0, k.where("n_group") + " is " + std::to_string(G) + ", which does not divide " +
                          "the " + std::to_string(E) + " routed experts (n_routed_experts)");
  require(G <= 64 && (G == 1 || E / G >= 2),
          k.where("n_group") + " is " + std::to_string(G) + ": a group's score is its two best " +
              "experts', so each of at most 64 groups needs two or more experts");
  require(kg <= G, k.where("topk_group") + " is " + std::to_string(kg) + ", more than the " +
                       std::to_string(G) + " groups (n_group)");
  require(!cfg.moe_noaux || cfg.experts_per_token <= kg * (E / G),
          k.where("num_experts_per_tok") + " is " + std::to_string(cfg.experts_per_token) +
              ", more than the " + std::to_string(kg * (E / G)) +
              " experts in topk_group groups; lower it or raise topk_group");
}

// DeepseekV3Config's num_nextn_predict_layers: the multi-token prediction modules the file holds
// after its num_hidden_layers blocks (as model.layers.{L}..{L+D-1}); absent or null is none.
int mtp_depth(const ConfigKeys& k) {
  const json::Value* v = k.find("num_nextn_predict_layers");
  if (v == nullptr || v->is_null()) return 0;
  require(v->is_number() && v->number() == std::floor(v->number()) && v->number() >= 0 &&
              v->number() < 1024,
          k.where("num_nextn_predict_layers") + " is " +
              (v->is_number() ? json_number(v->number()) : std::string("not a number")) +
              ", not a count of prediction modules from 0 up; the config is corrupt");
  return int(v->number());
}

// DeepseekV3Config's multi-head latent attention (q_lora_rank null: a plain q_proj) and its
// blocks: the first first_k_dense_replace dense (a SwiGLU MLP of intermediate_size), the rest
// DeepSeekMoE blocks (none when it is num_hidden_layers).
void read_latent_attention(const ConfigKeys& k, GPTConfig& cfg) {
  cfg.q_lora_rank = k.size_or("q_lora_rank", 0);
  cfg.kv_lora_rank = k.size("kv_lora_rank");
  cfg.qk_nope_dim = k.size("qk_nope_head_dim");
  cfg.qk_rope_dim = k.size("qk_rope_head_dim");
  cfg.v_head_dim = k.size("v_head_dim");
  cfg.head_dim = 0;  // DeepseekV3Config's head_dim is qk_rope_head_dim: the sizes above say it
  cfg.kv_heads = 0;  // every head has its own K and V from the latent
  cfg.rope_interleave = k.bool_or("rope_interleave", true);
  mtp_depth(k);  // checked here; the trainer's --mtp says how many it trains (read_hf_mtp_depth)
  const json::Value* experts = k.find("n_routed_experts");
  const json::Value* first = k.find("first_k_dense_replace");
  int dense = 3;  // DeepseekV3Config's default
  if (first != nullptr && !first->is_null()) {
    require(first->is_number() && first->number() == std::floor(first->number()) &&
                first->number() >= 0 && first->number() <= cfg.layers,
            k.where("first_k_dense_replace") + " is " +
                (first->is_number() ? json_number(first->number()) : std::string("not a number")) +
                ", not a count of blocks from 0 to num_hidden_layers (" +
                std::to_string(cfg.layers) + "); the config is corrupt");
    dense = int(first->number());
  }
  if (dense >= cfg.layers || experts == nullptr || experts->is_null()) return;
  const int dense_ffn = cfg.ffn_dim;  // intermediate_size: the dense blocks' MLP
  read_deepseek_moe(k, cfg);
  if (dense > 0) {
    cfg.dense_layers = dense;
    cfg.dense_ffn = dense_ffn;
  }
}

// rope_scaling of type "yarn" (transformers' _compute_yarn_parameters): its factor, original
// context, ramp (beta_fast, beta_slow) and mscale, mscale_all_dim; an explicit attention_factor
// or truncate false is not computed here.
void read_yarn(const ConfigKeys& k, const ConfigKeys& r, GPTConfig& cfg) {
  cfg.rope_yarn = true;
  cfg.rope_factor = float(r.number_or("factor", 0.0));
  require(cfg.rope_factor >= 1, k.where("rope_scaling") + ".factor is missing or below 1");
  cfg.rope_original_max_pos = r.size_or("original_max_position_embeddings", cfg.max_seq_len);
  // transformers' versions differ here: newer ones take max_position_embeddings / the original
  // context as the factor; where the two agree every version computes the same model.
  const double ratio = double(cfg.max_seq_len) / cfg.rope_original_max_pos;
  require(std::fabs(ratio - cfg.rope_factor) <= 1e-6 * ratio,
          k.where("rope_scaling") + ".factor " + json_number(cfg.rope_factor) +
              " is not max_position_embeddings / original_max_position_embeddings (" +
              json_number(ratio) +
              "); transformers' versions disagree on which one YaRN uses, so this trainer "
              "takes configs where they are equal");
  cfg.yarn_beta_fast = float(r.number_or("beta_fast", 32.0));
  cfg.yarn_beta_slow = float(r.number_or("beta_slow", 1.0));
  cfg.yarn_mscale = float(r.number_or("mscale", 0.0));
  cfg.yarn_mscale_all_dim = float(r.number_or("mscale_all_dim", 0.0));
  const json::Value* factor = r.find("attention_factor");
  require(factor == nullptr || factor->is_null(),
          r.where("attention_factor") +
              " is set; this trainer computes YaRN's attention factor from mscale and "
              "mscale_all_dim only");
  r.expect_bool("truncate", true, "this trainer rounds YaRN's correction range (truncate true)");
}

// transformers' LlamaConfig and the configs of the families of Llama blocks (Qwen2Config,
// MistralConfig, Phi3Config); absent keys take their defaults.
GPTConfig read_llama(const ConfigKeys& k, const json::Value& root, Arch arch) {
  GPTConfig cfg;
  cfg.arch = arch;
  cfg.layers = k.size("num_hidden_layers");
  cfg.heads = k.size("num_attention_heads");
  cfg.channels = k.size("hidden_size");
  cfg.vocab = k.size("vocab_size");
  cfg.max_seq_len = k.size("max_position_embeddings");
  cfg.padded_vocab = pad_vocab(cfg.vocab);
  cfg.kv_heads = k.size_or("num_key_value_heads", cfg.heads);
  cfg.ffn_dim = k.size("intermediate_size");
  cfg.norm_eps = float(k.number_or("rms_norm_eps", 1e-6));
  cfg.rope_theta = float(k.number_or("rope_theta", 10000.0));
  cfg.tied = k.bool_or("tie_word_embeddings", false);
  refuse_unimplemented(k);
  const bool qwen = arch == Arch::kQwen2 || arch == Arch::kQwen3 || arch == Arch::kQwen3Moe ||
                    arch == Arch::kQwen2Moe;
  if (!qwen) {
    k.expect_bool("attention_bias", false,
                  "this trainer's " + std::string(arch_name(arch)) + " has no attention biases");
  }
  if (arch == Arch::kQwen3 || arch == Arch::kQwen3Moe) {
    k.expect_bool("attention_bias", false, "this trainer's Qwen3 has no attention biases");
  }
  if (qwen) {
    // Qwen's window applies to the layers past max_window_layers only when turned on.
    k.expect_bool("use_sliding_window", false,
                  "this trainer's Qwen attends to the whole context in every layer");
  } else if (arch == Arch::kMistral || arch == Arch::kPhi3 || arch == Arch::kMixtral) {
    cfg.sliding_window = read_window(k, cfg.max_seq_len);
  }
  if (cfg.features().moe) read_experts(k, cfg);
  // An explicit head size (Qwen3's, Mistral Nemo's) may differ from hidden_size / heads.
  const int head_dim = k.size_or("head_dim", 0);
  if (head_dim > 0 && head_dim * cfg.heads != cfg.channels) cfg.head_dim = head_dim;
  if (cfg.features().mla) read_latent_attention(k, cfg);
  const json::Value* scaling = root.find("rope_scaling");
  if (scaling && !scaling->is_null()) {
    require(scaling->is_object(), k.where("rope_scaling") + " is not an object or null");
    const ConfigKeys r(*scaling, k.where("rope_scaling").substr(7));
    const json::Value* type = scaling->find("rope_type");
    if (type == nullptr) type = scaling->find("type");
    if (cfg.features().mla && type && type->is_string() && type->string() == "yarn") {
      read_yarn(k, r, cfg);
      return cfg;
    }
    require(type && type->is_string() && type->string() == "llama3",
            k.where("rope_scaling") + "'s rope_type is \"" +
                (type && type->is_string() ? type->string() : std::string("?")) +
                "\"; this trainer computes Llama 3.1's frequency scaling (\"llama3\") only");
    cfg.rope_factor = float(r.number_or("factor", 0.0));
    require(cfg.rope_factor > 0, k.where("rope_scaling") + ".factor is missing or not positive");
    cfg.rope_low_freq_factor = float(r.number_or("low_freq_factor", 1.0));
    cfg.rope_high_freq_factor = float(r.number_or("high_freq_factor", 4.0));
    cfg.rope_original_max_pos = r.size_or("original_max_position_embeddings", 8192);
  }
  return cfg;
}

// config.json's architectures for each family of Llama blocks; its model_type is the family's
// name (arch_name).
const char* hf_architecture(Arch arch) {
  switch (arch) {
    case Arch::kGpt2:
      return "GPT2LMHeadModel";
    case Arch::kLlama:
      return "LlamaForCausalLM";
    case Arch::kQwen2:
      return "Qwen2ForCausalLM";
    case Arch::kMistral:
      return "MistralForCausalLM";
    case Arch::kPhi3:
      return "Phi3ForCausalLM";
    case Arch::kQwen3:
      return "Qwen3ForCausalLM";
    case Arch::kOlmo2:
      return "Olmo2ForCausalLM";
    case Arch::kMixtral:
      return "MixtralForCausalLM";
    case Arch::kQwen3Moe:
      return "Qwen3MoeForCausalLM";
    case Arch::kOlmoe:
      return "OlmoeForCausalLM";
    case Arch::kQwen2Moe:
      return "Qwen2MoeForCausalLM";
    case Arch::kDeepseekV3:
      return "DeepseekV3ForCausalLM";
  }
  return "?";
}

// A float as the shortest decimal that reads back as the same float.
std::string float_text(float x) {
  char buf[32];
  for (int digits = 6; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, double(x));
    if (std::strtof(buf, nullptr) == x) break;
  }
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

}  // namespace

GPTConfig read_hf_config(const std::string& path) {
  const json::Value root = json::parse(read_config_text(path), "config " + path);
  require(root.is_object(), "config " + path + ": not a JSON object; the config is corrupt");
  const ConfigKeys keys(root, path);
  const json::Value* type = root.find("model_type");
  require(type != nullptr && type->is_string(),
          keys.where("model_type") + " is missing; pass a Hugging Face GPT-2 config.json");
  if (type->string() == "gpt2") {
    GPTConfig cfg = read_gpt2(keys);
    validate(cfg, "config " + path);
    return cfg;
  }
  Arch arch = Arch::kGpt2;
  require(parse_arch(type->string(), arch),
          keys.where("model_type") + " is \"" + type->string() +
              "\"; this trainer runs these model_types: " + arch_names());
  GPTConfig cfg = read_llama(keys, root, arch);
  validate(cfg, "config " + path);
  return cfg;
}

int read_hf_mtp_depth(const std::string& path) {
  const json::Value root = json::parse(read_config_text(path), "config " + path);
  require(root.is_object(), "config " + path + ": not a JSON object; the config is corrupt");
  const json::Value* type = root.find("model_type");
  if (type == nullptr || !type->is_string() || type->string() != arch_name(Arch::kDeepseekV3))
    return 0;
  return mtp_depth(ConfigKeys(root, path));
}

void check_shape_flags(const GPTConfig& cfg, const GPTConfig& flags,
                       const std::set<std::string>& given, const std::string& origin) {
  const bool llama = cfg.llama();
  // flag, its value, config.json's key (GPT-2's, Llama's) and value.
  auto check = [&](const char* flag, const std::string& mine, const char* gpt2_key,
                   const char* llama_key, const std::string& theirs) {
    if (!given.count(flag) || mine == theirs) return;
    throw InputError(std::string(flag) + " " + mine + " disagrees with " + origin + "'s " +
                     (llama ? llama_key : gpt2_key) + " " + theirs + "; drop " + flag +
                     " (the model's sizes come from " + origin + ")");
  };
  auto n = [](int v) { return std::to_string(v); };
  check("--layers", n(flags.layers), "n_layer", "num_hidden_layers", n(cfg.layers));
  check("--heads", n(flags.heads), "n_head", "num_attention_heads", n(cfg.heads));
  check("--dim", n(flags.channels), "n_embd", "hidden_size", n(cfg.channels));
  check("--vocab", n(flags.vocab), "vocab_size", "vocab_size", n(cfg.vocab));
  check("--max-seq-len", n(flags.max_seq_len), "n_positions", "max_position_embeddings",
        n(cfg.max_seq_len));
  check("--arch", arch_name(flags.arch), "model_type", "model_type", arch_name(cfg.arch));
  if (!llama) return;  // the Llama flags are refused with --arch gpt2 before this
  check("--kv-heads", n(flags.kv_head_count()), "", "num_key_value_heads", n(cfg.kv_head_count()));
  check("--ffn-dim", n(flags.ffn_width()), "", "intermediate_size", n(cfg.ffn_width()));
  check("--norm-eps", float_text(flags.norm_eps), "", "rms_norm_eps", float_text(cfg.norm_eps));
  check("--rope-theta", float_text(flags.rope_theta), "", "rope_theta", float_text(cfg.rope_theta));
  check("--tie-embeddings", flags.tied ? "1" : "0", "", "tie_word_embeddings",
        cfg.tied ? "1" : "0");
  auto scaling = [&](const GPTConfig& c) {
    if (c.rope_factor == 0) return std::string("none");
    return float_text(c.rope_factor) + "," + float_text(c.rope_low_freq_factor) + "," +
           float_text(c.rope_high_freq_factor) + "," + n(c.rope_original_max_pos);
  };
  check("--rope-scaling", scaling(flags), "", "rope_scaling", scaling(cfg));
  check("--sliding-window", n(flags.sliding_window), "", "sliding_window", n(cfg.sliding_window));
  check("--head-dim", n(flags.head_size()), "", "head_dim", n(cfg.head_size()));
  if (!cfg.moe()) return;
  check("--experts", n(flags.experts), "",
        cfg.arch == Arch::kMixtral ? "num_local_experts" : "num_experts", n(cfg.experts));
  check("--experts-per-token", n(flags.experts_per_token), "", "num_experts_per_tok",
        n(cfg.experts_per_token));
  check("--moe-renormalize", flags.moe_renormalize ? "1" : "0", "", "norm_topk_prob",
        cfg.moe_renormalize ? "1" : "0");
  check("--shared-expert-dim", n(flags.shared_ffn), "", "shared_expert_intermediate_size",
        n(cfg.shared_ffn));
}

std::string hf_config_json(const GPTConfig& cfg, safetensors::Dtype dtype) {
  auto line = [](const char* key, const std::string& value) {
    return std::string("  \"") + key + "\": " + value + ",\n";
  };
  auto n = [](int v) { return std::to_string(v); };
  std::string s = "{\n";
  if (!cfg.llama()) {
    s += line("architectures", std::string("[\"") + hf_architecture(cfg.arch) + "\"]");
    s += line("model_type", "\"gpt2\"");
    s += line("vocab_size", n(cfg.vocab)) + line("n_positions", n(cfg.max_seq_len));
    s += line("n_embd", n(cfg.channels)) + line("n_layer", n(cfg.layers));
    s += line("n_head", n(cfg.heads)) + line("n_inner", "null");
    s += line("activation_function", "\"gelu_new\"") + line("layer_norm_epsilon", "1e-05");
    // This trainer has no dropout: the saved model behaves the same in train mode.
    s += line("resid_pdrop", "0.0") + line("embd_pdrop", "0.0") + line("attn_pdrop", "0.0");
    s += line("scale_attn_weights", "true");
  } else {
    s += line("architectures", std::string("[\"") + hf_architecture(cfg.arch) + "\"]");
    s += line("model_type", std::string("\"") + arch_name(cfg.arch) + "\"");
    s += line("vocab_size", n(cfg.vocab)) + line("hidden_size", n(cfg.channels));
    s += line("intermediate_size", n(cfg.mixed() ? cfg.dense_ffn : cfg.ffn_width()));
    s += line("num_hidden_layers", n(cfg.layers)) + line("num_attention_heads", n(cfg.heads));
    s += line("num_key_value_heads", n(cfg.kv_head_count()));
    if (cfg.mla()) {
      s += line("q_lora_rank", cfg.q_lora_rank > 0 ? n(cfg.q_lora_rank) : "null");
      s += line("kv_lora_rank", n(cfg.kv_lora_rank));
      s += line("qk_nope_head_dim", n(cfg.qk_nope_dim));
      s += line("qk_rope_head_dim", n(cfg.qk_rope_dim));
      s += line("v_head_dim", n(cfg.v_head_dim));
      s += line("head_dim", n(cfg.qk_rope_dim));
      s += line("rope_interleave", cfg.rope_interleave ? "true" : "false");
      // The multi-token prediction modules trained (--mtp), written as model.layers.{L}..; said
      // even when 0, since DeepSeek-V3's own config code defaults to one.
      s += line("num_nextn_predict_layers", n(cfg.mtp));
      // The dense blocks first: all of them, none, or dense_layers.
      s += line("first_k_dense_replace", n(cfg.moe() ? cfg.dense_layers : cfg.layers));
      if (cfg.moe()) {
        s += line("n_routed_experts", n(cfg.experts));
        s += line("n_shared_experts", n(cfg.shared_ffn / cfg.ffn_width()));
        s += line("moe_intermediate_size", n(cfg.ffn_width()));
        s += line("num_experts_per_tok", n(cfg.experts_per_token));
        s += line("norm_topk_prob", cfg.moe_renormalize ? "true" : "false");
        s += line("routed_scaling_factor", float_text(cfg.moe_scale));
        s += line("scoring_func", cfg.moe_sigmoid ? "\"sigmoid\"" : "\"softmax\"");
        s += line("topk_method", cfg.moe_noaux ? "\"noaux_tc\"" : "\"greedy\"");
        s += line("n_group", n(cfg.moe_groups)) + line("topk_group", n(cfg.moe_topk_groups));
        s += line("aux_loss_alpha", float_text(cfg.moe_aux_coef));
      }
    } else {
      s += line("head_dim", n(cfg.head_size()));
    }
    s += line("max_position_embeddings", n(cfg.max_seq_len));
    s += line("rms_norm_eps", float_text(cfg.norm_eps));
    s += line("rope_theta", float_text(cfg.rope_theta));
    auto yarn = [&](float x) { return x == 0 ? std::string("null") : float_text(x); };
    if (cfg.rope_yarn) {
      s += line("rope_scaling",
                "{\"type\": \"yarn\", \"factor\": " + float_text(cfg.rope_factor) +
                    ", \"original_max_position_embeddings\": " + n(cfg.rope_original_max_pos) +
                    ", \"beta_fast\": " + float_text(cfg.yarn_beta_fast) + ", \"beta_slow\": " +
                    float_text(cfg.yarn_beta_slow) + ", \"mscale\": " + yarn(cfg.yarn_mscale) +
                    ", \"mscale_all_dim\": " + yarn(cfg.yarn_mscale_all_dim) + "}");
    } else
      s +=
          line("rope_scaling",
               cfg.rope_factor == 0
                   ? std::string("null")
                   : "{\"rope_type\": \"llama3\", \"factor\": " + float_text(cfg.rope_factor) +
                         ", \"low_freq_factor\": " + float_text(cfg.rope_low_freq_factor) +
                         ", \"high_freq_factor\": " + float_text(cfg.rope_high_freq_factor) +
                         ", \"original_max_position_embeddings\": " + n(cfg.rope_original_max_pos) +
                         "}");
    if (cfg.moe() && !cfg.mla()) {
      const bool mixtral = cfg.arch == Arch::kMixtral;
      s += line(mixtral ? "num_local_experts" : "num_experts", n(cfg.experts));
      s += line("num_experts_per_tok", n(cfg.experts_per_token));
      if (!mixtral) s += line("norm_topk_prob", cfg.moe_renormalize ? "true" : "false");
      if (cfg.arch == Arch::kQwen3Moe || cfg.arch == Arch::kQwen2Moe) {
        s += line("moe_intermediate_size", n(cfg.ffn_width()));
        s += line("decoder_sparse_step", "1") + line("mlp_only_layers", "[]");
      }
      if (cfg.shared_expert()) s += line("shared_expert_intermediate_size", n(cfg.shared_ffn));
      if (cfg.arch == Arch::kQwen2Moe) s += line("qkv_bias", cfg.no_qkv_bias ? "false" : "true");
      s += line("router_aux_loss_coef", float_text(cfg.moe_aux_coef));
      s += line("output_router_logits", "false");
    }
    if (cfg.arch == Arch::kMistral || cfg.arch == Arch::kPhi3 || cfg.arch == Arch::kMixtral) {
      s += line("sliding_window", cfg.sliding_window > 0 ? n(cfg.sliding_window) : "null");
    }
    if (cfg.arch == Arch::kQwen2 || cfg.arch == Arch::kQwen3 || cfg.arch == Arch::kQwen3Moe ||
        cfg.arch == Arch::kQwen2Moe) {
      s += line("use_sliding_window", "false");
    }
    s += line("hidden_act", "\"silu\"");
    if (cfg.arch != Arch::kQwen2 && cfg.arch != Arch::kQwen2Moe)
      s += line("attention_bias", "false");
    if (cfg.arch == Arch::kOlmoe) s += line("clip_qkv", "null");
    s += line("mlp_bias", "false") + line("attention_dropout", "0.0");
  }
  s += line("initializer_range", "0.02");
  s += line("tie_word_embeddings", cfg.tied ? "true" : "false");
  if (const std::optional<SpecialIds> ids = special_ids(cfg)) {
    s += line("bos_token_id", n(ids->bos)) + line("eos_token_id", n(ids->eos));
  }
  s += line("torch_dtype", dtype == safetensors::Dtype::kF32 ? "\"float32\"" : "\"bfloat16\"");
  return s + "  \"use_cache\": true\n}\n";
}

std::optional<int> read_hf_bos_token(const std::string& path) {
  const json::Value root = json::parse(read_config_text(path), "config " + path);
  const json::Value* v = root.find("bos_token_id");
  if (v == nullptr || v->is_null()) return std::nullopt;
  if (v->is_array()) {
    if (v->array().empty()) return std::nullopt;
    v = &v->array().front();
  }
  int64_t id = -1;
  try {
    id = v->integer();
  } catch (const json::TypeError&) {
  }
  require(id >= 0 && id < (int64_t(1) << 31),
          "config " + path + ": bos_token_id is not a token id; the config is corrupt");
  return int(id);
}

std::optional<int> known_bos_token(const GPTConfig& cfg) {
  const std::optional<SpecialIds> ids = special_ids(cfg);
  return ids ? std::optional<int>(ids->bos) : std::nullopt;
}

std::string hf_generation_config_json(const GPTConfig& cfg) {
  std::string s = "{\n  \"_from_model_config\": true";
  if (const std::optional<SpecialIds> ids = special_ids(cfg)) {
    s += ",\n  \"bos_token_id\": " + std::to_string(ids->bos);
    s += ",\n  \"eos_token_id\": " + std::to_string(ids->eos);
  }
  return s + "\n}\n";
}

}  // namespace mpf
