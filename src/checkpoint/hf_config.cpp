#include "checkpoint/hf_config.hpp"

#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "core/error.hpp"
#include "io/json.hpp"

namespace mpf {

namespace {

// GPT-2's end-of-text token, <|endoftext|>, the last of its 50257 ids.
constexpr int kGpt2Vocab = 50257, kGpt2EndOfText = 50256;

std::string read_config_text(const std::string& path) {
  struct stat st;
  require(stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode),
          "config " + path + ": cannot open; a Hugging Face model needs its config.json");
  require(st.st_size < 100'000'000,
          "config " + path + ": implausibly large for a config.json; the file is corrupt");
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  require(bool(in), "config " + path + ": read failed");
  return s.str();
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
    int64_t n = -1;
    try {
      n = v->integer();
    } catch (const json::TypeError&) {
    }
    require(n > 0 && n < (int64_t(1) << 31),
            where(key) + " is not a positive integer; the config is corrupt");
    return int(n);
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

}  // namespace

GPTConfig read_hf_config(const std::string& path) {
  const json::Value root = json::parse(read_config_text(path), "config " + path);
  require(root.is_object(), "config " + path + ": not a JSON object; the config is corrupt");
  const ConfigKeys keys(root, path);
  const json::Value* type = root.find("model_type");
  require(type != nullptr && type->is_string(),
          keys.where("model_type") + " is missing; pass a Hugging Face GPT-2 config.json");
  require(type->string() == "gpt2", keys.where("model_type") + " is \"" + type->string() +
                                        "\"; this trainer runs gpt2 models");
  GPTConfig cfg = read_gpt2(keys);
  validate(cfg, "config " + path);
  return cfg;
}

void check_shape_flags(const GPTConfig& cfg, const ShapeFlags& flags, const std::string& origin) {
  auto check = [&](const std::optional<int>& flag, int value, const char* name, const char* key) {
    require(!flag || *flag == value, std::string(name) + " " + std::to_string(flag.value_or(0)) +
                                         " disagrees with " + origin + "'s " + key + " " +
                                         std::to_string(value) + "; drop " + name +
                                         " (the model's sizes come from " + origin + ")");
  };
  check(flags.layers, cfg.layers, "--layers", "n_layer");
  check(flags.heads, cfg.heads, "--heads", "n_head");
  check(flags.dim, cfg.channels, "--dim", "n_embd");
  check(flags.vocab, cfg.vocab, "--vocab", "vocab_size");
  check(flags.max_seq_len, cfg.max_seq_len, "--max-seq-len", "n_positions");
}

std::string hf_config_json(const GPTConfig& cfg, safetensors::Dtype dtype) {
  const bool gpt2_vocab = cfg.vocab == kGpt2Vocab;
  std::string s = "{\n";
  s += "  \"architectures\": [\"GPT2LMHeadModel\"],\n";
  s += "  \"model_type\": \"gpt2\",\n";
  s += "  \"vocab_size\": " + std::to_string(cfg.vocab) + ",\n";
  s += "  \"n_positions\": " + std::to_string(cfg.max_seq_len) + ",\n";
  s += "  \"n_embd\": " + std::to_string(cfg.channels) + ",\n";
  s += "  \"n_layer\": " + std::to_string(cfg.layers) + ",\n";
  s += "  \"n_head\": " + std::to_string(cfg.heads) + ",\n";
  s += "  \"n_inner\": null,\n";
  s += "  \"activation_function\": \"gelu_new\",\n";
  s += "  \"layer_norm_epsilon\": 1e-05,\n";
  // This trainer has no dropout: the saved model behaves the same in train mode.
  s += "  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n";
  s += "  \"initializer_range\": 0.02,\n";
  s += "  \"scale_attn_weights\": true,\n";
  s += "  \"tie_word_embeddings\": true,\n";
  if (gpt2_vocab) {
    s += "  \"bos_token_id\": " + std::to_string(kGpt2EndOfText) + ",\n";
    s += "  \"eos_token_id\": " + std::to_string(kGpt2EndOfText) + ",\n";
  }
  s += std::string("  \"torch_dtype\": \"") +
       (dtype == safetensors::Dtype::kF32 ? "float32" : "bfloat16") + "\",\n";
  s += "  \"use_cache\": true\n}\n";
  return s;
}

std::string hf_generation_config_json(const GPTConfig& cfg) {
  std::string s = "{\n  \"_from_model_config\": true";
  if (cfg.vocab == kGpt2Vocab) {
    s += ",\n  \"bos_token_id\": " + std::to_string(kGpt2EndOfText);
    s += ",\n  \"eos_token_id\": " + std::to_string(kGpt2EndOfText);
  }
  return s + "\n}\n";
}

}  // namespace mpf
