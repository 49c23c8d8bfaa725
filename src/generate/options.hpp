// Command-line options of mpiformer-generate. Parsing checks syntax and ranges; checks that need
// the model or the tokenizer (token ids against the vocabulary, the prompt against max_seq_len)
// happen where those are known. Every problem is an InputError naming the flag and the fix.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "generate/sampler.hpp"

namespace mpf {

struct GenerateOptions {
  // The model: an llm.c model file, or a training checkpoint directory (its latest or a step).
  std::string init_from, load;
  int64_t load_step = 0;
  // The prompt: text (byte-level models) or token ids; neither: the tokenizer's end-of-text.
  std::string prompt;
  bool prompt_given = false;
  std::vector<int32_t> prompt_tokens;
  int max_new_tokens = 64;
  Sampling sampling;
  std::string tokenizer;
  // Output besides the text on stdout.
  std::string tokens_out;  // the whole sequence's ids, comma-separated
  std::string logits_out;  // each new token's V logits, float32
  bool kv_cache = true;    // --no-kv-cache: recompute the whole prefix for every token
  // Layout and system.
  int tp = 1, pp = 1;
  int ep = 1;  // expert-parallel ranks: a mixture of experts' experts split over them
  int threads = 0;
  std::string gpu_aware_mpi = "auto";  // as mpiformer-train's --gpu-aware-mpi
  bool help = false;
};

// Throws InputError for an unknown flag, a missing or malformed value, a value out of range, or
// flags that exclude each other.
GenerateOptions parse_generate_options(int argc, const char* const* argv);

std::string generate_usage();

}  // namespace mpf
