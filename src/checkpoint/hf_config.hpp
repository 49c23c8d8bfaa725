// Hugging Face's config.json (transformers' GPT2Config) as the model's shape, and the
// config.json and generation_config.json a saved model directory carries. Keys that would change
// the maths this trainer computes (another activation, LayerNorm epsilon, untied embeddings) are
// refused by name rather than ignored.
#pragma once

#include <optional>
#include <string>

#include "io/safetensors.hpp"
#include "model/config.hpp"

namespace mpf {

// Model sizes the user gave as flags (--layers, --heads, --dim, --vocab, --max-seq-len).
struct ShapeFlags {
  std::optional<int> layers, heads, dim, vocab, max_seq_len;
  bool any() const { return layers || heads || dim || vocab || max_seq_len; }
};

// The shape config.json at `path` describes. InputError naming the file and the key: a missing
// or mistyped size, a model_type this trainer does not run, a setting it does not compute.
GPTConfig read_hf_config(const std::string& path);

// InputError naming the flag and config.json's key where a flag disagrees with `cfg`, read from
// `origin`.
void check_shape_flags(const GPTConfig& cfg, const ShapeFlags& flags, const std::string& origin);

// What a saved directory holds: config.json for transformers' AutoModelForCausalLM, and
// generation_config.json with the defaults (the end-of-text id where the vocabulary is GPT-2's).
std::string hf_config_json(const GPTConfig& cfg, safetensors::Dtype dtype);
std::string hf_generation_config_json(const GPTConfig& cfg);

}  // namespace mpf
