#include "optim/adamw.hpp"

#include <algorithm>
#include <cmath>

#include "core/parallel.hpp"
#include "core/transfer.hpp"

namespace mpf {

namespace {
// One element's update; c1, c2: the bias corrections 1/(1 − βᵗ).
KOKKOS_INLINE_FUNCTION void adamw_element(float& p, float g, float& m, float& v, float lr,
                                          float beta1, float beta2, float eps, float weight_decay,
                                          float grad_scale, float c1, float c2, bf16* p16) {
  const float gi = g * grad_scale;
  const float mi = beta1 * m + (1.0f - beta1) * gi;
  const float vi = beta2 * v + (1.0f - beta2) * gi * gi;
  m = mi;
  v = vi;
  const float pi = p - lr * ((mi * c1) / (sqrtf(vi * c2) + eps) + weight_decay * p);
  p = pi;
  // bf16 runs: the products' copy of the weights, without another pass over them.
  if (p16) *p16 = to_bf16(pi);
}
}  // namespace

std::vector<OptimizerSegment> piece_segments(const Parameters& params) {
  std::vector<OptimizerSegment> out;
  for (const SlabPiece& p : params.layout.pieces())
    out.push_back({p.offset, p.offset, p.offset, p.length, p.tensor});
  return out;
}

int64_t second_moment_layout(std::vector<OptimizerSegment>& segments, int64_t state_size) {
  // The Muon segments' stretches of m, in m's order, and the elements of them before each end.
  std::vector<std::pair<int64_t, int64_t>> muon;  // (state, length)
  for (const OptimizerSegment& s : segments) {
    if (s.by_muon) muon.push_back({s.state, s.length});
  }
  std::sort(muon.begin(), muon.end());
  std::vector<int64_t> starts, before(1, 0);
  for (const auto& [state, length] : muon) {
    starts.push_back(state);
    before.push_back(before.back() + length);
  }
  for (OptimizerSegment& s : segments) {
    if (s.by_muon) continue;
    // Segments do not overlap: every Muon stretch starting before this one ends before it.
    const size_t k =
        size_t(std::upper_bound(starts.begin(), starts.end(), s.state) - starts.begin());
    s.v_state = s.state - before[k];
  }
  return state_size - before.back();
}

AdamW::AdamW(const AdamWConfig& cfg, const GPTConfig& model, std::vector<OptimizerSegment> segments,
             int64_t state_size)
    : cfg_(cfg),
      segments_(std::move(segments)),
      m_("mpf::adamw::m", state_size),
      v_("mpf::adamw::v", second_moment_layout(segments_, state_size)) {
  std::vector<AdamWChunk> chunks;
  for (const OptimizerSegment& s : segments_) {
    if (s.by_muon) continue;
    for (int64_t at = 0; at < s.length; at += kChunk) {
      chunks.push_back({s.param + at, s.grad + at, s.state + at, s.v_state + at,
                        int(std::min<int64_t>(kChunk, s.length - at)), decay_of(s)});
    }
  }
  chunks_ = Kokkos::View<AdamWChunk*, MemSpace>("mpf::adamw::chunks", chunks.size());
  copy_from_host(chunks_.data(), chunks.data(), chunks.size() * sizeof(AdamWChunk),
                 "h2d optimizer chunks");
}

void AdamW::step(float* params, const float* grads, float lr, float grad_scale, bf16* params16) {
  ++t_;
  if (device_shaped()) {
    // One kernel for every segment: on a GPU 148 launches (GPT-2 124M's slab pieces) would cost
    // more than the update of the small ones.
    const float beta1 = cfg_.beta1, beta2 = cfg_.beta2, eps = cfg_.eps;
    const float c1 = 1.0f / (1.0f - std::pow(beta1, static_cast<float>(t_)));
    const float c2 = 1.0f / (1.0f - std::pow(beta2, static_cast<float>(t_)));
    const Kokkos::View<AdamWChunk*, MemSpace> chunks = chunks_;
    float* m = m_.data();
    float* v = v_.data();
    for_each(
        "mpf::adamw_update", int64_t(chunks.extent(0)) * kChunk, KOKKOS_LAMBDA(int64_t i) {
          const AdamWChunk& c = chunks(i / kChunk);
          const int j = int(i % kChunk);
          if (j >= c.length) return;
          adamw_element(params[c.param + j], grads[c.grad + j], m[c.state + j], v[c.v_state + j],
                        lr, beta1, beta2, eps, c.weight_decay, grad_scale, c1, c2,
                        params16 ? params16 + c.param + j : nullptr);
        });
    return;
  }
  for (const OptimizerSegment& s : segments_) {
    if (s.by_muon) continue;
    adamw_update(params + s.param, grads + s.grad, m_.data() + s.state, v_.data() + s.v_state,
                 s.length, lr, cfg_.beta1, cfg_.beta2, cfg_.eps, decay_of(s), grad_scale, t_,
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
        adamw_element(p[i], g[i], m[i], v[i], lr, beta1, beta2, eps, weight_decay, grad_scale, c1,
                      c2, p16 ? p16 + i : nullptr);
      });
}

}  // namespace mpf
