#include "optim/adamw.hpp"

#include <cmath>

#include "core/parallel.hpp"

namespace mpf {

AdamW::AdamW(const AdamWConfig& cfg, const Parameters& params)
    : cfg_(cfg), m_("mpf::adamw::m", params.count), v_("mpf::adamw::v", params.count) {}

void AdamW::step(Parameters& params, const Parameters& grads, float lr, float grad_scale) {
  ++t_;
  const auto infos = parameter_infos(params.cfg);
  const auto& sizes = params.sizes;
  int64_t offset = 0;
  for (int i = 0; i < kNumParameterTensors; ++i) {
    adamw_update(params.slab.data() + offset, grads.slab.data() + offset, m_.data() + offset,
                 v_.data() + offset, sizes[i], lr, cfg_.beta1, cfg_.beta2, cfg_.eps,
                 infos[i].weight_decay ? cfg_.weight_decay : 0.0f, grad_scale, t_);
    offset += sizes[i];
  }
}

void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, float grad_scale, int64_t t) {
  const float c1 = 1.0f / (1.0f - std::pow(beta1, static_cast<float>(t)));
  const float c2 = 1.0f / (1.0f - std::pow(beta2, static_cast<float>(t)));
  for_each(
      "mpf::adamw_update", n, KOKKOS_LAMBDA(int64_t i) {
        const float gi = g[i] * grad_scale;
        const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] -= lr * ((mi * c1) / (sqrtf(vi * c2) + eps) + weight_decay * p[i]);
      });
}

}  // namespace mpf
