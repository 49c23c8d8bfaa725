// AdamW (Loshchilov & Hutter) with bias correction, decoupled weight decay on the matrices only,
// and the gradient-clipping factor folded into the same pass: the update is memory-bound, so
// everything touching a parameter happens in one read of p, g, m, v and one write of p, m, v.
//   m = β1·m + (1−β1)·s·g;  v = β2·v + (1−β2)·(s·g)²;  m̂ = m/(1−β1ᵗ);  v̂ = v/(1−β2ᵗ)
//   p −= lr·(m̂/(√v̂ + ε) + wd·p)                                   (llm.c's gpt2_update)
#pragma once

#include <cstdint>

#include "core/types.hpp"
#include "model/parameters.hpp"

namespace mpf {

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
};

class AdamW {
 public:
  AdamW(const AdamWConfig& cfg, const Parameters& params);

  // One update of every parameter with learning rate lr; grad_scale multiplies the gradients
  // (the clipping factor, 1 when not clipping).
  void step(Parameters& params, const Parameters& grads, float lr, float grad_scale);

  int64_t steps_taken() const { return t_; }
  int64_t state_bytes() const { return 2 * int64_t(m_.extent(0)) * int64_t(sizeof(float)); }

 private:
  AdamWConfig cfg_;
  Slab m_, v_;  // first and second moments, one slab each, laid out as the parameters
  int64_t t_ = 0;
};

// The update kernel on n consecutive elements (p, g, m, v point at the same offset).
void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, float grad_scale, int64_t t);

}  // namespace mpf
