#include "optim/adamw.hpp"

#include <cmath>

#include "core/parallel.hpp"

namespace mpf {

std::vector<OptimizerSegment> piece_segments(const Parameters& params) {
  std::vector<OptimizerSegment> out;
  for (const SlabPiece& p : params.layout.pieces())
    out.push_back({p.offset, p.offset, p.offset, p.length, p.tensor});
  return out;
}

AdamW::AdamW(const AdamWConfig& cfg, const GPTConfig& model, std::vector<OptimizerSegment> segments,
             int64_t state_size)
    : cfg_(cfg),
      segments_(std::move(segments)),
      m_("mpf::adamw::m", state_size),
      v_("mpf::adamw::v", state_size) {
  const auto infos = parameter_infos(model);
  for (int i = 0; i < kNumParameterTensors; ++i) decay_[i] = infos[i].weight_decay;
}

void AdamW::step(float* params, const float* grads, float lr, float grad_scale, bf16* params16) {
  ++t_;
  for (const OptimizerSegment& s : segments_) {
    adamw_update(params + s.param, grads + s.grad, m_.data() + s.state, v_.data() + s.state,
                 s.length, lr, cfg_.beta1, cfg_.beta2, cfg_.eps,
                 decay_[s.tensor] ? cfg_.weight_decay : 0.0f, grad_scale, t_,
                 params16 ? params16 + s.param : nullptr);
  }
}

void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, float grad_scale, int64_t t,
                  bf16* p16) {
  const float c1 = 1.0f / (1.0f - std::pow(beta1, static_cast<float>(t)));
  const float c2 = 1.0f / (1.0f - std::pow(beta2, static_cast<float>(t)));
  for_each(
      "mpf::adamw_update", n, KOKKOS_LAMBDA(int64_t i) {
        const float gi = g[i] * grad_scale;
        const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        const float pi = p[i] - lr * ((mi * c1) / (sqrtf(vi * c2) + eps) + weight_decay * p[i]);
        p[i] = pi;
        // bf16 runs: the products' copy of the weights, without another pass over them.
        if (p16) p16[i] = to_bf16(pi);
      });
}

}  // namespace mpf
