// The model the flags describe: a fresh model's config from --layers ... --tie-embeddings, or the
// one an --init-from model file holds; and --rope-scaling's text, which the state file and the
// flag share.
#pragma once

#include <string>
#include <vector>

#include "layout/options.hpp"
#include "model/config.hpp"

namespace mpf {

// Throws InputError for sizes that do not make a model, a Llama flag given with --arch gpt2, or a
// malformed --rope-scaling; for a Hugging Face --init-from, a flag that disagrees with its
// config.json (checkpoint/hf_checkpoint.hpp).
GPTConfig model_config(const TrainOptions& o);
// --moe-aux-coef, given or saved with the run, over the model's coefficient; InputError for a
// dense model or a negative value.
void apply_moe_aux_coef(const TrainOptions& o, GPTConfig& cfg);
// mpiformer-train's flags for a fresh model of cfg's sizes ("--arch llama --layers 12 ...").
std::string model_flags(const GPTConfig& cfg);
// Whether model_flags(cfg), read as the trainer reads them, make cfg's model (its config.json's
// every field): false for what no flag sets (deepseek_v3's latent attention, YaRN's rope scaling).
bool flags_make_model(const GPTConfig& cfg);
// The model of the flags alone (defaults where not given).
GPTConfig flags_config(const TrainOptions& o);

// A fresh model's vocabulary from the manifest.json that mpiformer-tokenize writes beside --data's
// .bin shards: sets o.vocab to its tokenizer.vocab_size when --vocab is not given and returns a
// note naming the manifest; "" when no manifest is there (the flags' vocabulary, as without
// one). InputError when --vocab is smaller than the manifest's vocabulary (the shards may hold
// ids the model has no row for) or a manifest cannot be read. Call it only for a fresh model: a
// resumed run or --init-from takes the vocabulary from its checkpoint.
std::string adopt_data_vocab(TrainOptions& o);

// The manifest.json beside each .bin entry of --data (a path, a glob or a comma list of them),
// each directory once, in the order given; those that exist.
std::vector<std::string> data_manifests(const std::string& data);

// --kv-heads, --ffn-dim, --norm-eps, --rope-theta, --rope-scaling, --tie-embeddings: what only
// a Llama takes.
bool is_llama_flag(const std::string& flag);

// "none", or "FACTOR,LOW,HIGH,ORIGINAL" (%g each) for a Llama with rope scaling.
std::string rope_scaling_text(const GPTConfig& cfg);

// --rope-scaling's value spelled as rope_scaling_text spells it; InputError if malformed.
std::string canonical_rope_scaling(const std::string& text);

}  // namespace mpf
