// Plain stand-ins for the Llama layer kernels (RMSNorm, RoPE, SwiGLU, grouped-query attention)
// until the optimised ones land; same signatures, so the model does not change when they do.
#pragma once

#include <vector>

#include "core/types.hpp"

namespace mpf {

void rmsnorm_forward(Tensor out, Tensor rstd, Tensor inp, Tensor weight, int64_t N, int C,
                     float eps);
void rmsnorm_backward_input(Tensor dinp, Tensor dresidual, Tensor dout, Tensor inp, Tensor rstd,
                            Tensor weight, int64_t N, int C);
void rmsnorm_backward_weight(Tensor dweight, Tensor dout, Tensor inp, Tensor rstd, int64_t N,
                             int C);

struct RopeScaling {
  float factor = 0, low_freq_factor = 1, high_freq_factor = 4;
  int original_max_position = 8192;
};
std::vector<float> rope_inverse_frequencies(int hs, double theta, const RopeScaling& scaling);
void rope_tables(Tensor cos_table, Tensor sin_table, const std::vector<float>& inv_freq,
                 int max_pos);
void rope_forward(Tensor qkv, Tensor cos_table, Tensor sin_table, int64_t rows, int T, int pos0,
                  int NH, int KVH, int hs);
void rope_backward(Tensor dqkv, Tensor cos_table, Tensor sin_table, int64_t rows, int T, int pos0,
                   int NH, int KVH, int hs);

void swiglu_forward(Tensor out, Tensor inp, int64_t N, int F);
void swiglu_backward_input(Tensor dinp, Tensor dout, Tensor inp, int64_t N, int F);

void attention_forward(Tensor out, Tensor att, Tensor qkv, int B, int T, int NH, int KVH, int hs);
void attention_backward_input(Tensor dqkv, Tensor datt, Tensor dout, Tensor qkv, Tensor att, int B,
                              int T, int NH, int KVH, int hs);

}  // namespace mpf
