#include "model/layers/moe.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/parallel.hpp"
#include "core/transfer.hpp"

namespace mpf {

void moe_route(Tensor probs, int32_t* choice, Tensor gates, const MoeShape& s) {
  const int E = s.E, k = s.k;
  const bool renormalize = s.renormalize, sigmoid = s.sigmoid;
  const int groups = s.groups, topk_groups = s.topk_groups, per_group = E / s.groups;
  const float scale = s.scale;
  const float* bias = s.bias;
  for_each(
      "mpf::moe_route", s.rows, KOKKOS_LAMBDA(int64_t n) {
        float* p = probs.data() + n * E;
        if (sigmoid) {
          for (int e = 0; e < E; ++e) p[e] = 1.0f / (1.0f + expf(-p[e]));
        } else {
          float m = p[0];
          for (int e = 1; e < E; ++e) m = p[e] > m ? p[e] : m;
          float z = 0.0f;
          for (int e = 0; e < E; ++e) z += p[e] = expf(p[e] - m);
          for (int e = 0; e < E; ++e) p[e] /= z;
        }
        // Group-limited: the topk_groups groups with the largest sums of their two best biased
        // scores (ties to the lower group), as a bit mask (config.cpp keeps groups <= 64).
        uint64_t kept = ~uint64_t(0);
        if (groups > 1) {
          kept = 0;
          for (int t = 0; t < topk_groups; ++t) {
            int best = -1;
            float best_sum = 0.0f;
            for (int g = 0; g < groups; ++g) {
              if (kept >> g & 1) continue;
              float a = -INFINITY, b = -INFINITY;  // the group's two best
              for (int e = g * per_group; e < (g + 1) * per_group; ++e) {
                const float v = p[e] + (bias ? bias[e] : 0.0f);
                if (v > a) {
                  b = a;
                  a = v;
                } else if (v > b) {
                  b = v;
                }
              }
              if (best < 0 || a + b > best_sum) {
                best = g;
                best_sum = a + b;
              }
            }
            kept |= uint64_t(1) << best;
          }
        }
        // The k largest (biased, 0 outside the kept groups), each the first of its value among
        // those not yet taken.
        float chosen = 0.0f;
        for (int j = 0; j < k; ++j) {
          int best = -1;
          float best_v = 0.0f;
          for (int e = 0; e < E; ++e) {
            bool taken = false;
            for (int i = 0; i < j; ++i) taken = taken || choice[n * k + i] == e;
            const float v = (kept >> (e / per_group) & 1) ? p[e] + (bias ? bias[e] : 0.0f) : 0.0f;
            if (!taken && (best < 0 || v > best_v)) {
              best = e;
              best_v = v;
            }
          }
          choice[n * k + j] = best;
          chosen += p[best];
        }
        for (int j = 0; j < k; ++j) {
          const float g = p[choice[n * k + j]];
          gates(n * k + j) = (renormalize ? g / chosen : g) * scale;
        }
      });
}

namespace {
std::vector<int64_t> moe_counts(const int32_t* counts, int E) {
  std::vector<int32_t> host(size_t(E), 0);
  copy_to_host(host.data(), counts, size_t(E) * sizeof(int32_t), "d2h expert counts");
  return std::vector<int64_t>(host.begin(), host.end());
}

// The sort's blocks of consecutive slots: a block's count of each expert, then the prefix sum
// over (expert, block), place each slot. Small, so a slot looks back over its block alone.
constexpr int64_t kSortBlock = 64;
// The balance statistics' blocks of tokens in the device shape.
constexpr int64_t kStatsBlock = 64;

// The sort's (E, blocks) counts, then offsets: grown when needed, kept (a step allocates
// nothing), released when Kokkos finalizes.
Kokkos::View<int32_t*, MemSpace> sort_buffer;
int32_t* sort_scratch(int64_t n) {
  static const bool hooked = (Kokkos::push_finalize_hook([] { sort_buffer = {}; }), true);
  (void)hooked;
  if (int64_t(sort_buffer.extent(0)) < n) {
    sort_buffer = {};
    sort_buffer = Kokkos::View<int32_t*, MemSpace>(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("mpf::moe_sort::offsets")), n);
  }
  return sort_buffer.data();
}
}  // namespace

std::vector<int64_t> moe_sort(int32_t* counts, int32_t* order, int32_t* where,
                              const int32_t* choice, const MoeShape& s) {
  // A counting sort, parallel over the slots: each block of kSortBlock slots counts its slots
  // of each expert; an exclusive prefix sum over (expert, block), expert-major, gives where each
  // block's slots of each expert start; a slot's place is its block's start for its expert plus
  // the slots of that expert before it in the block. All integers: the order (by expert, then
  // by slot) and its bits do not depend on the shape or the thread count.
  const int64_t slots = s.slots();
  const int E = s.E;
  const int64_t blocks = (slots + kSortBlock - 1) / kSortBlock;
  int32_t* offsets = sort_scratch(std::max<int64_t>(int64_t(E) * blocks, 1));
  for_each(
      "mpf::moe_count", blocks, KOKKOS_LAMBDA(int64_t b) {
        for (int e = 0; e < E; ++e) offsets[e * blocks + b] = 0;
        const int64_t end = (b + 1) * kSortBlock < slots ? (b + 1) * kSortBlock : slots;
        for (int64_t i = b * kSortBlock; i < end; ++i) ++offsets[choice[i] * blocks + b];
      });
  {
    const profile::Scope timer("mpf::moe_offsets");
    Kokkos::parallel_scan(
        "mpf::moe_offsets", Kokkos::RangePolicy<ExecSpace, int64_t>(0, int64_t(E) * blocks),
        KOKKOS_LAMBDA(int64_t i, int32_t & before, bool final) {
          const int32_t n = offsets[i];
          if (final) offsets[i] = before;
          before += n;
        });
  }
  for_each(
      "mpf::moe_place", std::max<int64_t>(slots, E), KOKKOS_LAMBDA(int64_t i) {
        if (i < E) {
          const int64_t end = i + 1 < E ? offsets[(i + 1) * blocks] : slots;
          counts[i] = blocks > 0 ? int32_t(end - offsets[i * blocks]) : 0;
        }
        if (i >= slots) return;
        const int32_t e = choice[i];
        const int64_t b = i / kSortBlock;
        int32_t at = offsets[e * blocks + b];
        for (int64_t j = b * kSortBlock; j < i; ++j) at += choice[j] == e ? 1 : 0;
        order[at] = int32_t(i);
        where[i] = at;
      });
  return moe_counts(counts, s.E);
}

void moe_balance_stats(Tensor stats, Tensor probs, const int32_t* choice, const MoeShape& s) {
  const int E = s.E, k = s.k;
  const int64_t T = s.seq_rows(), cells = int64_t(s.seqs) * E;
  if (!device_shaped()) {
    // A cell's tokens in order in one thread (c_e counts whole choices, so its order does not
    // matter; Σ_t p_te's does).
    for_each(
        "mpf::moe_balance_stats", cells, KOKKOS_LAMBDA(int64_t cell) {
          const int64_t b = cell / E;
          const int e = int(cell % E);
          float count = 0.0f, p = 0.0f;
          for (int64_t t = b * T; t < (b + 1) * T; ++t) {
            p += probs(t * E + e);
            for (int j = 0; j < k; ++j) count += choice[t * k + j] == e ? 1.0f : 0.0f;
          }
          stats(cell) = count;
          stats(cells + cell) = p;
        });
    return;
  }
  // Device shape: a thread per (sequence row, block of kStatsBlock tokens, expert) sums its
  // block into a scratch partial (consecutive threads on consecutive experts: the probabilities'
  // row read once, coalesced), then a thread per cell adds its blocks' partials in order.
  const int64_t tblocks = (T + kStatsBlock - 1) / kStatsBlock, parts = cells * tblocks;
  float* partial = detail::column_scratch(2 * parts);  // (2, seqs, tblocks, E)
  for_each(
      "mpf::moe_balance_stats", parts, KOKKOS_LAMBDA(int64_t i) {
        const int e = int(i % E);
        const int64_t bt = i / E, b = bt / tblocks, t0 = b * T + (bt % tblocks) * kStatsBlock;
        const int64_t t1 = t0 + kStatsBlock < (b + 1) * T ? t0 + kStatsBlock : (b + 1) * T;
        float count = 0.0f, p = 0.0f;
        for (int64_t t = t0; t < t1; ++t) {
          p += probs(t * E + e);
          for (int j = 0; j < k; ++j) count += choice[t * k + j] == e ? 1.0f : 0.0f;
        }
        partial[i] = count;
        partial[parts + i] = p;
      });
  for_each(
      "mpf::moe_balance_stats::blocks", cells, KOKKOS_LAMBDA(int64_t cell) {
        const int64_t b = cell / E;
        const int e = int(cell % E);
        float count = 0.0f, p = 0.0f;
        for (int64_t tb = 0; tb < tblocks; ++tb) {
          const int64_t i = (b * tblocks + tb) * E + e;
          count += partial[i];
          p += partial[parts + i];
        }
        stats(cell) = count;
        stats(cells + cell) = p;
      });
}

void moe_balance_loss(double* total, Tensor stats, float coef, int64_t T, const MoeShape& s) {
  const int E = s.E;
  const int64_t cells = int64_t(s.seqs) * E;
  const double scale = double(coef) * E / (double(s.k) * double(T) * double(T));
  sum_into(
      "mpf::moe_balance_loss", cells,
      KOKKOS_LAMBDA(int64_t cell) { return scale * double(stats(cell)) * stats(cells + cell); },
      total);
}

namespace {
template <class Out>
void gather_rows(Out out, Tensor x, const int32_t* order, int C, const MoeShape& s) {
  const int k = s.k;
  for_each_2d(
      "mpf::moe_gather", s.slots(), C,
      KOKKOS_LAMBDA(int64_t p, int c) { put(out, p * C + c, x(int64_t(order[p] / k) * C + c)); });
}
}  // namespace

void moe_gather(Tensor out, Tensor x, const int32_t* order, int C, const MoeShape& s) {
  gather_rows(out, x, order, C, s);
}

void moe_gather(Tensor16 out, Tensor x, const int32_t* order, int C, const MoeShape& s) {
  gather_rows(out, x, order, C, s);
}

namespace {
KOKKOS_INLINE_FUNCTION float widen(float x) {
  return x;
}
KOKKOS_INLINE_FUNCTION float widen(bf16 x) {
  return from_bf16(x);
}

// Y: Tensor, or Tensor16 for outputs kept in bf16.
template <class Y>
void combine_rows(Tensor out, Y y, Tensor gates, const int32_t* where, int C, const MoeShape& s) {
  const int k = s.k;
  const bool gated = gates.extent(0) > 0;
  for_each_2d(
      "mpf::moe_combine", s.rows, C, KOKKOS_LAMBDA(int64_t n, int c) {
        float acc = out(n * C + c);
        for (int j = 0; j < k; ++j) {
          const float w = gated ? gates(n * k + j) : 1.0f;
          acc += w * get(y, int64_t(where[n * k + j]) * C + c);
        }
        out(n * C + c) = acc;
      });
}

template <class Y>
void gate_grads(Tensor dgates, Tensor dy, Y y, const int32_t* order, int C, const MoeShape& s) {
  for_rows(
      "mpf::moe_gate_grads", s.slots(), C, KOKKOS_LAMBDA(const Row& r, int64_t p) {
        const float* a = dy.data() + p * C;
        const auto* b = y.data() + p * C;
        const float dot = r.sum(C, [a, b](int c) { return a[c] * widen(b[c]); });
        r.once([=] { dgates(order[p]) = dot; });
      });
}
}  // namespace

void moe_combine(Tensor out, Tensor y, Tensor gates, const int32_t* where, int C,
                 const MoeShape& s) {
  combine_rows(out, y, gates, where, C, s);
}

void moe_combine(Tensor out, Tensor16 y, Tensor gates, const int32_t* where, int C,
                 const MoeShape& s) {
  combine_rows(out, y, gates, where, C, s);
}

void moe_gate_grads(Tensor dgates, Tensor dy, Tensor y, const int32_t* order, int C,
                    const MoeShape& s) {
  gate_grads(dgates, dy, y, order, C, s);
}

void moe_gate_grads(Tensor dgates, Tensor dy, Tensor16 y, const int32_t* order, int C,
                    const MoeShape& s) {
  gate_grads(dgates, dy, y, order, C, s);
}

void moe_scale_rows(Tensor x, Tensor gates, const int32_t* order, int width, const MoeShape& s) {
  for_each_2d(
      "mpf::moe_scale_rows", s.slots(), width,
      KOKKOS_LAMBDA(int64_t p, int c) { x(p * width + c) *= gates(order[p]); });
}

void moe_route_backward(Tensor dlogits, Tensor dgates, Tensor probs, const int32_t* choice,
                        Tensor gates, Tensor stats, float aux_scale, const MoeShape& s) {
  const int E = s.E, k = s.k;
  const bool renormalize = s.renormalize, sigmoid = s.sigmoid;
  const float scale = s.scale;
  const int64_t T = s.seq_rows();
  for_each(
      "mpf::moe_route_backward", s.rows, KOKKOS_LAMBDA(int64_t n) {
        const float* p = probs.data() + n * E;
        const float* load = stats.data() + (n / T) * E;  // c_e of the token's row
        float* dp = dlogits.data() + n * E;
        for (int e = 0; e < E; ++e) dp[e] = aux_scale * load[e];
        // gate_j = c · p_j / S (S the chosen probabilities' sum, c the scale): ∂/∂p_j = (c ·
        // dgate_j − Σ_i dgate_i · gate_i) / S; without renormalisation gate_j = c · p_j.
        float dot = 0.0f, chosen = 0.0f;
        for (int j = 0; j < k; ++j) {
          dot += dgates(n * k + j) * gates(n * k + j);
          chosen += p[choice[n * k + j]];
        }
        for (int j = 0; j < k; ++j) {
          const float g = dgates(n * k + j);
          dp[choice[n * k + j]] += renormalize ? (scale * g - dot) / chosen : scale * g;
        }
        if (sigmoid) {  // ∂/∂z_e = p_e · (1 − p_e) · dp_e
          for (int e = 0; e < E; ++e) dp[e] *= p[e] * (1.0f - p[e]);
          return;
        }
        // Softmax: ∂/∂z_e = p_e · (dp_e − Σ_e' p_e' · dp_e').
        float mean = 0.0f;
        for (int e = 0; e < E; ++e) mean += p[e] * dp[e];
        for (int e = 0; e < E; ++e) dp[e] = p[e] * (dp[e] - mean);
      });
}

}  // namespace mpf
