// Global gradient-norm clipping (Megatron / torch.nn.utils.clip_grad_norm_): the norm is taken
// over every gradient element on every rank that owns distinct ones, then all gradients are
// scaled by clip/(norm + 1e-6) when that is below 1. The scale is applied inside AdamW.
#pragma once

#include "core/types.hpp"

namespace mpf {

// Σ g² over n elements, in double, in an order fixed by n (core/parallel.hpp sum).
double sum_of_squares(const float* g, int64_t n);

// The factor to multiply gradients by: 1 when clip <= 0 (off) or norm <= clip.
float clip_scale(double norm, float clip);

}  // namespace mpf
