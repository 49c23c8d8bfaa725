// Hugging Face's config.json (transformers' GPT2Config and LlamaConfig) as the model's shape, and
// the config.json and generation_config.json a saved model directory carries. Keys that would
// change the maths this trainer computes (another activation, GPT-2's LayerNorm epsilon or untied
// head, biases in a Llama, a rope scaling other than llama3's) are refused by name rather than
// ignored.
#pragma once

#include <optional>
#include <set>
#include <string>

#include "io/safetensors.hpp"
#include "model/config.hpp"

namespace mpf {

// The model config.json at `path` describes. InputError naming the file and the key: a missing or
// mistyped size, a model_type this trainer does not run, a setting it does not compute.
GPTConfig read_hf_config(const std::string& path);

// config.json's num_nextn_predict_layers at `path` for a deepseek_v3 model: how many multi-token
// prediction modules its files carry after the blocks (0 when absent, for other families too).
// The trainer's --mtp defaults to it; the loader passes over the modules past --mtp
// (hf_unused_mtp).
int read_hf_mtp_depth(const std::string& path);

// InputError naming the flag and config.json's key where a model flag the user gave (`given`,
// e.g. "--dim") disagrees with `cfg`, read from `origin`; `flags` is the model those flags make.
void check_shape_flags(const GPTConfig& cfg, const GPTConfig& flags,
                       const std::set<std::string>& given, const std::string& origin);

// config.json's bos_token_id at `path` (the first, where it lists several), or none; InputError
// for a value that is not a token id.
std::optional<int> read_hf_bos_token(const std::string& path);
// The begin-of-document token of a vocabulary this trainer knows: <|endoftext|> (50256) for
// GPT-2's, <|begin_of_text|> (128000) for Llama 3's; none otherwise.
std::optional<int> known_bos_token(const GPTConfig& cfg);

// What a saved directory holds: config.json for transformers' AutoModelForCausalLM, and
// generation_config.json with the defaults (the begin and end ids where the vocabulary is GPT-2's
// or Llama 3's).
std::string hf_config_json(const GPTConfig& cfg, safetensors::Dtype dtype);
std::string hf_generation_config_json(const GPTConfig& cfg);

}  // namespace mpf
