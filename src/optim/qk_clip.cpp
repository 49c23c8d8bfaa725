#include "optim/qk_clip.hpp"

#include <cmath>
#include <string>

#include "core/bf16.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"

namespace mpf {

namespace {
// x[0, n) *= f, and its bf16 copy (at the same offset of weights16) rounded again.
void scale_run(float* x, int64_t n, float f, bf16* x16) {
  for_each(
      "mpf::qk_clip", n, KOKKOS_LAMBDA(int64_t i) {
        x[i] *= f;
        if (x16) x16[i] = to_bf16(x[i]);
      });
}
}  // namespace

QkClipReport qk_clip(Parameters& params, const TpShard& shard, const std::vector<float>& head_max,
                     float tau, bf16* weights16) {
  const int NH = shard.heads, hs = shard.head_size, C = shard.cfg.channels;
  const size_t blocks = params.t.blocks.size();
  if (head_max.size() != blocks * size_t(NH)) {
    MPF_FATAL("qk_clip: " + std::to_string(head_max.size()) + " head maxima for " +
              std::to_string(blocks) + " blocks of " + std::to_string(NH) + " heads");
  }
  // A key head per query head, held here alone: scale both; else the query head alone.
  const bool multi_head = shard.kv_heads == NH && shard.kv_replicas == 1;
  auto scale = [&](const Tensor& t, int64_t first, int64_t n, float f) {
    float* x = t.data() + first;
    scale_run(x, n, f, weights16 ? weights16 + (x - params.slab.data()) : nullptr);
  };
  QkClipReport report;
  for (size_t b = 0; b < blocks; ++b) {
    const LayerParameters& p = params.t.blocks[b];
    for (int h = 0; h < NH; ++h) {
      const float m = head_max[b * NH + size_t(h)];
      report.largest = std::max(report.largest, m);
      if (!(m > tau)) continue;
      const float gamma = tau / m, f = multi_head ? std::sqrt(gamma) : gamma;
      const int64_t q_row = int64_t(h) * hs, k_row = int64_t(NH + h) * hs;  // rows of [Q | K | V]
      scale(p.qkvw, q_row * C, int64_t(hs) * C, f);
      if (p.qkvb.data()) scale(p.qkvb, q_row, hs, f);
      if (multi_head) {
        scale(p.qkvw, k_row * C, int64_t(hs) * C, f);
        if (p.qkvb.data()) scale(p.qkvb, k_row, hs, f);
      }
      ++report.heads;
    }
  }
  return report;
}

}  // namespace mpf
