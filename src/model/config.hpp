// The shape of a GPT-2 model (llm.c's GPT2Config plus the padded vocabulary).
#pragma once

#include <cstdint>
#include <string>

namespace mpf {

struct GPTConfig {
  int max_seq_len = 0;   // maxT: rows of the position table
  int vocab = 0;         // V: real vocabulary; softmax and loss run over these columns only
  int padded_vocab = 0;  // Vp >= V: rows of the token table (padded rows are zero, never read)
  int layers = 0;        // L
  int heads = 0;         // NH
  int channels = 0;      // C, divisible by NH
};

// llm.c pads the vocabulary to a multiple of 128 (50257 -> 50304) so the head GEMM tiles well.
int pad_vocab(int vocab, int multiple = 128);

// Throws InputError naming the offending size unless every size is positive, C % NH == 0 and
// Vp >= V. `origin` says where the sizes came from ("flags", "checkpoint foo.bin").
void validate(const GPTConfig& cfg, const std::string& origin);

// Whether two configs describe the same model.
bool same_shape(const GPTConfig& a, const GPTConfig& b);

// Number of parameters, with the padded token table and the position table.
int64_t parameter_count(const GPTConfig& cfg);

// "L12 H12 C768 V50257 (padded 50304) maxT 1024".
std::string describe(const GPTConfig& cfg);

}  // namespace mpf
