// Hugging Face checkpoints in and out: --init-from a model directory (config.json and
// model.safetensors, or the sharded model.safetensors.index.json) or a .safetensors file, and
// --save-hf DIR, a directory transformers' AutoModelForCausalLM.from_pretrained loads.
//
// The names are transformers' GPT2LMHeadModel's (with or without the "transformer." prefix) and
// LlamaForCausalLM's. A tied LM head (GPT-2's always) is not stored, and lm_head.weight, if a file
// has it, must equal the token embedding. GPT-2's linear layers are Conv1D, stored (in, out):
// transposed against this trainer's (out, in) rows, so a rank reads and writes their column
// segments; a Llama's q, k and v projections stack into qkvw and gate and up into fcw (their rows
// in that order). Every rank reads and writes only the byte ranges of its own shard
// (model/shard.hpp's runs), never the whole model.
#pragma once

#include <mpi.h>

#include <optional>
#include <set>
#include <string>

#include "checkpoint/hf_config.hpp"
#include "io/safetensors.hpp"
#include "model/parameters.hpp"
#include "model/shard.hpp"
#include "parallel/grid.hpp"

namespace mpf {

// Whether --init-from's path is a Hugging Face source: a directory, or a file that opens with a
// safetensors header rather than llm.c's magic.
bool is_hf_source(const std::string& path);

// The model's shape for --init-from `path`: config.json's (in the directory, or beside the
// .safetensors file), else `flags_cfg` (the sizes the flags give; none: config.json is required).
// Checked against the flags the user gave and against every tensor's presence and shape. No MPI:
// every rank reaches the same verdict. InputError naming the file and the key or tensor.
GPTConfig read_hf_model_config(const std::string& path, const std::optional<GPTConfig>& flags_cfg,
                               const std::set<std::string>& given);

// The model config.json describes for --init-from `path` (in the directory, or beside the file),
// or none when there is none: what the model flags default to.
std::optional<GPTConfig> hf_source_config(const std::string& path);
// The multi-token prediction modules the Hugging Face source at `path` holds (its config.json's
// num_nextn_predict_layers; 0 without one).
int hf_source_mtp_depth(const std::string& path);

// A warning when the model (cfg, read from `path`) has no Q, K, V biases but the file holds them
// (Qwen2-MoE's qkv_bias false: transformers leaves them unused too); "" otherwise.
std::string hf_unused_biases(const std::string& path, const GPTConfig& cfg);

// A warning when the deepseek_v3 file at `path` holds more multi-token prediction modules
// (num_nextn_predict_layers, their tensors after the model's blocks) than cfg.mtp trains: the
// loader passes over the others; "" otherwise.
std::string hf_unused_mtp(const std::string& path, const GPTConfig& cfg);

// config.json's bos_token_id for --init-from `path` (in the directory, or beside the file), or
// none when there is no config.json or it names none.
std::optional<int> hf_bos_token(const std::string& path);

// Collective over world: each rank reads its shard's elements of every tensor (TP rows or
// column segments, its pipeline stage's blocks) into params; padded vocabulary rows stay zero.
// InputError on every rank alike (the lowest failing rank's message) for a failed read or a
// non-finite value, naming the file and the tensor.
void load_hf_model(const std::string& path, const GPTConfig& cfg, const TpShard& shard,
                   Parameters& params, MPI_Comm world);

// InputError unless `dir` can be created: it must not exist (nothing a user wrote is replaced)
// and its parent must be a writable directory. Checked at start-up.
void check_hf_output(const std::string& dir);

// Collective over the grid's world: writes DIR (config.json, generation_config.json and
// model.safetensors in `dtype`, and a copy of `tokenizer_json`'s bytes as tokenizer.json unless it
// is "") under a partial name, each rank its own tensors' bytes, and renames it into place without
// replacing anything. Returns the error, the same on every rank.
std::string save_hf_model(const std::string& dir, const Grid& grid, const TpShard& shard,
                          const Parameters& params, safetensors::Dtype dtype,
                          const std::string& tokenizer_json);

// "f32" or "bf16" (--save-hf-dtype); InputError otherwise.
safetensors::Dtype parse_hf_dtype(const std::string& name);

}  // namespace mpf
