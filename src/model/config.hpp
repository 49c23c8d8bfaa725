// The shape of a model: llm.c's GPT2Config plus the padded vocabulary, and what a Llama-family
// model adds (Hugging Face's LlamaConfig: grouped-query attention, the SwiGLU width, RMSNorm's
// eps, rotary embeddings with Llama 3.1's frequency scaling, tied or untied embeddings). The
// defaults are GPT-2's, so a GPT-2 config never names the Llama fields.
#pragma once

#include <cstdint>
#include <string>

namespace mpf {

enum class Arch { kGpt2, kLlama };

struct GPTConfig {
  int max_seq_len = 0;   // maxT: rows of the position table (GPT-2), the longest context
  int vocab = 0;         // V: real vocabulary; softmax and loss run over these columns only
  int padded_vocab = 0;  // Vp >= V: rows of the token table (padded rows are zero, never read)
  int layers = 0;        // L
  int heads = 0;         // NH
  int channels = 0;      // C, divisible by NH
  Arch arch = Arch::kGpt2;
  int kv_heads = 0;  // KVH, dividing NH (grouped-query attention); 0: NH
  int ffn_dim = 0;   // F, the MLP's hidden width; 0: 4C
  float norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  // Llama 3.1's rope_scaling of type "llama3"; factor 0 means none.
  float rope_factor = 0.0f, rope_low_freq_factor = 1.0f, rope_high_freq_factor = 4.0f;
  int rope_original_max_pos = 8192;
  bool tied = true;  // the LM head is wte (GPT-2 always; Llama when --tie-embeddings 1)

  bool llama() const { return arch == Arch::kLlama; }
  int head_size() const { return channels / heads; }
  int kv_head_count() const { return kv_heads > 0 ? kv_heads : heads; }
  int ffn_width() const { return ffn_dim > 0 ? ffn_dim : 4 * channels; }
  // Rows of the packed [Q | K | V] projection: (NH + 2 KVH) · hs (3C for GPT-2).
  int qkv_rows() const { return (heads + 2 * kv_head_count()) * head_size(); }
  // Rows of the MLP's first layer: [gate | up] (2F) for SwiGLU, F for GPT-2's GELU MLP.
  int mlp_in_rows() const { return llama() ? 2 * ffn_width() : ffn_width(); }
};

const char* arch_name(Arch arch);  // "gpt2", "llama"

// llm.c pads the vocabulary to a multiple of 128 (50257 -> 50304) so the head GEMM tiles well.
int pad_vocab(int vocab, int multiple = 128);

// Throws InputError naming the offending size unless every size is positive, C % NH == 0,
// NH % KVH == 0, the head size is even for rotary embeddings and Vp >= V. `origin` says where
// the sizes came from ("flags", "checkpoint foo.bin").
void validate(const GPTConfig& cfg, const std::string& origin);

// Whether two configs describe the same model.
bool same_shape(const GPTConfig& a, const GPTConfig& b);

// Number of parameters, with the padded token table and the position table.
int64_t parameter_count(const GPTConfig& cfg);

// "L12 H12 C768 V50257 (padded 50304) maxT 1024"; a Llama adds its arch and kv heads, F, eps,
// theta, its rope scaling and whether it is tied.
std::string describe(const GPTConfig& cfg);

}  // namespace mpf
