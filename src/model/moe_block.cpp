#include "model/moe_block.hpp"

#include <algorithm>
#include <vector>

#include "core/parallel.hpp"
#include "model/block_parts.hpp"
#include "model/layers/linear.hpp"
#include "model/layers/matmul.hpp"
#include "model/layers/moe.hpp"
#include "model/layers/swiglu.hpp"
#include "parallel/device_mpi.hpp"

namespace mpf {

namespace {
MoeShape moe_shape(const LayerActivations& a, const TpShard& s, int64_t R) {
  const GPTConfig& cfg = s.cfg;
  return {R, a.moe.seqs, cfg.experts, cfg.experts_per_token, cfg.moe_renormalize};
}

// f(e, first, n) for each of the E experts with rows: its n rows from `first` in expert order.
template <class F>
void for_each_expert(const int64_t* counts, int E, F&& f) {
  int64_t first = 0;
  for (int e = 0; e < E; ++e) {
    if (counts[e] > 0) f(e, first, counts[e]);
    first += counts[e];
  }
}

// Expert e's slices of the (E, 2F_l, C) and (E, C, F_l) weights (or their gradients).
Tensor expert_fcw(const LayerParameters& p, const TpShard& s, int e) {
  const int64_t n = int64_t(s.mlp_in) * s.cfg.channels;
  return Tensor(p.fcw.data() + e * n, n);
}
Tensor expert_fcprojw(const LayerParameters& p, const TpShard& s, int e) {
  const int64_t n = int64_t(s.cfg.channels) * s.fc;
  return Tensor(p.fcprojw.data() + e * n, n);
}
}  // namespace

void moe_mlp_forward(const LayerActivations& a, Tensor out, Tensor partial, Tensor residual,
                     const LayerParameters& p, const TpShard& s, const tp::SequenceSplit& seq,
                     MPI_Comm tp) {
  const GPTConfig& cfg = s.cfg;
  const int C = cfg.channels, E = cfg.experts;
  const int64_t R = seq.rows;
  const MoeShape shape = moe_shape(a, s, R);
  const Tensor none;
  // Route every row (identically on every TP rank), then the balance loss's statistics, whole
  // sequences' under CP.
  {
    const Fp32Products fp32;  // the choices must not hang on a rounding
    linear_forward(a.router_probs, none, a.ln2, p.routerw, none, R, C, E);
  }
  moe_route(a.router_probs, a.moe.choice, a.gates, shape);
  const std::vector<int64_t> counts =
      moe_sort(a.moe.counts, a.moe.order, a.moe.where, a.moe.choice, shape);
  std::copy(counts.begin(), counts.end(), a.moe.host_counts);
  moe_balance_stats(a.moe_stats, a.router_probs, a.moe.choice, shape);
  if (a.moe.cp != MPI_COMM_NULL) {
    allreduce_sum(a.moe_stats.data(), int64_t(a.moe_stats.extent(0)), a.moe.cp);
  }
  if (a.moe.aux && a.moe.adds_aux) {
    moe_balance_loss(a.moe.aux, a.moe_stats, cfg.moe_aux_coef, a.moe.seq_len, shape);
    if (a.moe.load) {  // the rows' counts, whole sequences' under CP (the stats' first half)
      float* load = a.moe.load;
      const Tensor stats = a.moe_stats;
      const int seqs = shape.seqs;
      for_each(
          "mpf::moe_load", E, KOKKOS_LAMBDA(int64_t e) {
            float n = 0.0f;
            for (int b = 0; b < seqs; ++b) n += stats(int64_t(b) * E + e);
            load[e] += n;
          });
    }
  }
  // Each expert's SwiGLU MLP on its rows, this rank's share of the width.
  moe_gather(a.moe_in, a.ln2, a.moe.order, C, shape);
  for_each_expert(counts.data(), E, [&](int e, int64_t first, int64_t n) {
    const Tensor fch = rows(a.fch, first, n, s.mlp_in);
    const Tensor h = rows(a.fch_gelu, first, n, s.fc);
    linear_forward(fch, none, rows(a.moe_in, first, n, C), expert_fcw(p, s, e), none, n, C,
                   s.mlp_in);
    swiglu_forward(h, fch, n, s.fc);
    linear_forward(rows(a.moe_out, first, n, C), none, h, expert_fcprojw(p, s, e), none, n, s.fc,
                   C);
  });
  // The gated outputs, a token's slots in order, join the residual leaving the region.
  const Tensor sum = seq.on ? partial : out;
  seed_rows(sum, residual, none, seq, s.rank, C);
  moe_combine(sum, a.moe_out, a.gates, a.moe.where, C, shape);
  tp::leave_forward(sum.data(), out.data(), C, seq, tp);
}

void moe_mlp_backward_input(BackwardBuffers& buf, const BlockWeightInputs& w, Tensor dln2,
                            Tensor dout, const LayerActivations& a, const LayerParameters& p,
                            const TpShard& s, const tp::SequenceSplit& seq, MPI_Comm tp) {
  const GPTConfig& cfg = s.cfg;
  const int C = cfg.channels, E = cfg.experts;
  const int64_t R = seq.rows;
  const MoeShape shape = moe_shape(a, s, R);
  // The output gradient of every row: gathered under SP, else a copy (w.dout, where it may live,
  // is rewritten below).
  const Tensor g = buf.moe_dout;
  if (seq.on) {
    tp::leave_backward(dout.data(), g.data(), C, seq, tp);
  } else {
    copy_into(g, dout.data(), R * C);
  }
  const int64_t* counts = a.moe.host_counts;
  std::copy(counts, counts + E, w.counts);  // for W: a recomputation may reroute a.moe meanwhile
  // Each slot's output gradient, ungated; the gates' gradients Σ_f dh·h (summed over TP: h is
  // split); then the gated gradients the experts see.
  const Tensor dy = buf.moe_dy;
  moe_gather(dy, g, a.moe.order, C, shape);
  for_each_expert(counts, E, [&](int e, int64_t first, int64_t n) {
    linear_backward_input(rows(buf.dmlp, first, n, s.fc), rows(dy, first, n, C),
                          expert_fcprojw(p, s, e), n, s.fc, C);
  });
  moe_gate_grads(buf.dgates, buf.dmlp, a.fch_gelu, a.moe.order, s.fc, shape);
  allreduce_sum(buf.dgates.data(), shape.slots(), tp);
  moe_scale_rows(buf.dmlp, a.gates, a.moe.order, s.fc, shape);
  copy_into(w.dout, dy.data(), shape.slots() * C);
  moe_scale_rows(w.dout, a.gates, a.moe.order, C, shape);
  swiglu_backward_input(w.dfch, buf.dmlp, a.fch, shape.slots(), s.fc);
  // The experts' input gradients (into dy, free now), and the router's.
  for_each_expert(counts, E, [&](int e, int64_t first, int64_t n) {
    linear_backward_input(rows(dy, first, n, C), rows(w.dfch, first, n, s.mlp_in),
                          expert_fcw(p, s, e), n, C, s.mlp_in);
  });
  // ∂J/∂p_te of the balance loss: (1/B_global) coef E / (k T²) c_e = dloss coef E c_e / (k T).
  const float aux_scale = float(double(a.moe.dloss) * cfg.moe_aux_coef * E /
                                (double(cfg.experts_per_token) * double(a.moe.seq_len)));
  moe_route_backward(w.drouter, buf.dgates, a.router_probs, a.moe.choice, a.gates, a.moe_stats,
                     aux_scale, shape);
  if (s.rank == 0) {
    const Fp32Products fp32;
    linear_backward_input(dln2, w.drouter, p.routerw, R, C, E);
  } else {
    fill(dln2.data(), R * C, 0.0f);
  }
  moe_combine(dln2, dy, Tensor(), a.moe.where, C, shape);
}

void moe_mlp_backward_weight(const LayerParameters& g, const BlockWeightInputs& w,
                             const LayerActivations& a, const TpShard& s,
                             const tp::SequenceSplit& seq) {
  const GPTConfig& cfg = s.cfg;
  const int C = cfg.channels;
  const Tensor none;
  for_each_expert(w.counts, cfg.experts, [&](int e, int64_t first, int64_t n) {
    linear_backward_weight(expert_fcprojw(g, s, e), none, rows(w.dout, first, n, C),
                           rows(a.fch_gelu, first, n, s.fc), n, s.fc, C);
    linear_backward_weight(expert_fcw(g, s, e), none, rows(w.dfch, first, n, s.mlp_in),
                           rows(a.moe_in, first, n, C), n, C, s.mlp_in);
  });
  const Fp32Products fp32;  // the router's products all in fp32, as its forward
  linear_backward_weight(g.routerw, none, w.drouter, a.ln2, seq.rows, C, cfg.experts);
}

}  // namespace mpf
