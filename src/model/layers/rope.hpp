// Rotary position embeddings (Su et al. 2021, "RoFormer") in Hugging Face's half-split form: a
// head's element i is paired with element i + hs/2 (their `rotate_half`), which is how Hugging
// Face stores Llama's q_proj and k_proj rows, and each pair is rotated by the angle
// pos · inv_freq[i]:
//   x'[i]        = x[i]·cos − x[i + hs/2]·sin
//   x'[i + hs/2] = x[i + hs/2]·cos + x[i]·sin
// RoPE has no parameters; its backward is the transposed rotation, which is its inverse.
#pragma once

#include <vector>

#include "core/types.hpp"
#include "model/positions.hpp"

namespace mpf {

// Llama 3.1's "rope_scaling": {"rope_type": "llama3", ...}. factor 0 means no scaling.
struct RopeScaling {
  float factor = 0, low_freq_factor = 1, high_freq_factor = 4;
  int original_max_position = 8192;
};

// YaRN's "rope_scaling": {"type": "yarn", ...} (Peng et al. 2023, as transformers'
// _compute_yarn_parameters): factor > 1, the original context, the ramp's beta_fast and
// beta_slow, and mscale, mscale_all_dim (0: absent).
struct YarnScaling {
  float factor = 1, beta_fast = 32, beta_slow = 1, mscale = 0, mscale_all_dim = 0;
  int original_max_position = 4096;
};
// inv_freq of `dim` rotated values under YaRN: each frequency blended between theta's
// (extrapolated) and theta's divided by the factor (interpolated) by a linear ramp over the
// correction range of beta_fast and beta_slow rotations in the original context, rounded outward.
std::vector<float> yarn_inverse_frequencies(int dim, double theta, const YarnScaling& yarn);
// The factor YaRN multiplies the rotary tables by: mscale(factor, mscale) / mscale(factor,
// mscale_all_dim) when both are set, else mscale(factor, 1), with mscale(s, m) = 0.1·m·ln(s) + 1.
float yarn_attention_factor(const YarnScaling& yarn);
// mscale(s, m) = 0.1·m·ln(s) + 1 for s > 1, else 1.
double yarn_mscale(double scale, double mscale);

// inv_freq[i] = theta^(−2i/hs) for i < hs/2, then Llama 3.1's per-frequency scaling, each step in
// float32 as Hugging Face's _compute_default_rope_parameters and _compute_llama3_parameters run it
// in PyTorch. Host function; hs even.
std::vector<float> rope_inverse_frequencies(int hs, double theta, const RopeScaling& scaling);

// cos_table and sin_table (max_pos, hs/2): cos and sin of the angle pos · inv_freq[i] for
// positions 0..max_pos−1, the angle rounded to float32 as PyTorch forms it, its cos and sin then
// taken in double and rounded. Computed on the host once and copied in; inv_freq has hs/2 values.
void rope_tables(Tensor cos_table, Tensor sin_table, const std::vector<float>& inv_freq,
                 int max_pos);
// The same for the rows of `rows` (model/positions.hpp): row t of the tables is position
// rows.position(t)'s, so a context-parallel rank's tables rotate its chunks by their positions in
// the whole sequence.
// Both tables are multiplied by `scale` (YaRN's attention factor) after rounding.
void rope_tables(Tensor cos_table, Tensor sin_table, const std::vector<float>& inv_freq,
                 const PositionRuns& rows, float scale = 1.0f);

// In place on qkv (rows, (NH + 2·KVH)·hs), rows [Q heads | K heads | V heads]: rotates every Q and
// K head of row n by position pos0 + n % T; V is untouched. Training passes pos0 = 0 and the
// sequence length T; the KV-cache decoder passes pos0 = the cache's length and T = rows. NH and
// KVH are this rank's heads; the tables must cover position pos0 + T − 1.
void rope_forward(Tensor qkv, Tensor cos_table, Tensor sin_table, int64_t rows, int T, int pos0,
                  int NH, int KVH, int hs);

// The backward, in place on dqkv laid out as qkv: rotates the Q and K gradients back (by −angle);
// V's gradient is untouched.
void rope_backward(Tensor dqkv, Tensor cos_table, Tensor sin_table, int64_t rows, int T, int pos0,
                   int NH, int KVH, int hs);

}  // namespace mpf
