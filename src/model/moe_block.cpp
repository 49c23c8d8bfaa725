#include "model/moe_block.hpp"

#include <mpi.h>
#include <algorithm>
#include <functional>
#include <vector>

#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/profile.hpp"
#include "model/block_parts.hpp"
#include "model/layers/gated_rows.hpp"
#include "model/layers/linear.hpp"
#include "model/layers/matmul.hpp"
#include "model/layers/moe.hpp"
#include "model/layers/swiglu.hpp"
#include "parallel/device_mpi.hpp"

namespace mpf {

namespace {
MoeShape moe_shape(const LayerActivations& a, const TpShard& s, int64_t R) {
  const GPTConfig& cfg = s.cfg;
  MoeShape shape{R, a.moe.seqs, cfg.experts, cfg.experts_per_token, cfg.moe_renormalize};
  shape.sigmoid = cfg.moe_sigmoid;
  shape.scale = cfg.moe_scale;
  if (cfg.moe_noaux) {  // greedy: the scores alone, every expert a candidate
    shape.groups = cfg.moe_groups;
    shape.topk_groups = cfg.moe_topk_groups;
  }
  return shape;
}

// f(e, first, n) for each of n_experts experts with rows: its n rows from `first` in order.
template <class F>
void for_each_expert(const int64_t* counts, int n_experts, F&& f) {
  int64_t first = 0;
  for (int e = 0; e < n_experts; ++e) {
    if (counts[e] > 0) f(e, first, counts[e]);
    first += counts[e];
  }
}

// Local expert e's slices of the (El, 2F_l, C) and (El, C, F_l) weights (or their gradients).
Tensor expert_fcw(const LayerParameters& p, const TpShard& s, int e) {
  const int64_t n = int64_t(s.mlp_in) * s.cfg.channels;
  return Tensor(p.fcw.data() + e * n, n);
}
Tensor expert_fcprojw(const LayerParameters& p, const TpShard& s, int e) {
  const int64_t n = int64_t(s.cfg.channels) * s.fc;
  return Tensor(p.fcprojw.data() + e * n, n);
}

// The expert-parallel dispatch (Megatron-LM's all-to-all token dispatcher in MPI terms): the
// token side holds its slots sorted by expert, so the rows for EP rank r (experts
// [r·El, (r+1)·El)) are one stretch; MPI_Alltoallv delivers them by sending rank, and the expert
// side reorders them by (local expert, sending rank, its order), which fixes each expert's
// product and sums whatever the timing. The way back mirrors it.
struct Dispatch {
  int ranks = 1, local = 0;           // EP ranks, experts per rank
  const int64_t* sent = nullptr;      // (E) slots per expert on the token side
  const int64_t* received = nullptr;  // (ranks, local) rows from each rank for each local expert
  MPI_Comm comm = MPI_COMM_NULL;

  int64_t sent_to(int r) const {
    int64_t n = 0;
    for (int j = 0; j < local; ++j) n += sent[r * local + j];
    return n;
  }
  int64_t received_from(int r) const {
    int64_t n = 0;
    for (int j = 0; j < local; ++j) n += received[r * local + j];
    return n;
  }
  // Rows of each local expert over all sending ranks.
  std::vector<int64_t> expert_rows() const {
    std::vector<int64_t> n(size_t(local), 0);
    for (int r = 0; r < ranks; ++r)
      for (int j = 0; j < local; ++j) n[size_t(j)] += received[r * local + j];
    return n;
  }
  int64_t total_received() const {
    int64_t n = 0;
    for (int r = 0; r < ranks; ++r) n += received_from(r);
    return n;
  }
  // Token side to expert side (`out`: the rows as they arrive, by sending rank) or back
  // (`back`: the token side receives what it sent, in its order). Rows of floats, or of bf16
  // values (Tensor16: half the bytes).
  template <class Rows>
  void exchange(Rows from, Rows to, int C, bool back) const {
    std::vector<int64_t> send(static_cast<size_t>(ranks)), recv(static_cast<size_t>(ranks));
    for (int r = 0; r < ranks; ++r) {
      send[size_t(r)] = (back ? received_from(r) : sent_to(r)) * C;
      recv[size_t(r)] = (back ? sent_to(r) : received_from(r)) * C;
    }
    const profile::Scope scope("mpi all-to-all (experts)");
    alltoallv(from.data(), send.data(), to.data(), recv.data(), comm);
  }
  // Rows by sending rank to rows by local expert (to_experts), or the reverse.
  // Only local experts [j0, j1) when given (a group of an overlapped dispatch).
  template <class Rows>
  void reorder(Rows to, Rows from, int C, bool to_experts, int j0 = 0, int j1 = -1) const {
    if (j1 < 0) j1 = local;
    const std::vector<int64_t> per_expert = expert_rows();
    std::vector<int64_t> expert_first(size_t(local), 0);
    for (int j = 1; j < local; ++j)
      expert_first[size_t(j)] = expert_first[size_t(j - 1)] + per_expert[size_t(j - 1)];
    int64_t by_rank = 0;
    for (int r = 0; r < ranks; ++r) {
      for (int j = 0; j < local; ++j) {
        const int64_t n = received[r * local + j];
        if (n > 0 && j >= j0 && j < j1) {
          const int64_t by_expert = expert_first[size_t(j)];
          const int64_t dst = to_experts ? by_expert : by_rank,
                        src = to_experts ? by_rank : by_expert;
          copy_into(rows(to, dst, n, C), from.data() + src * C, n * C);
        }
        expert_first[size_t(j)] += n;
        by_rank += n;
      }
    }
  }
  // Group g of `groups` of the local experts: [first_expert(g), first_expert(g + 1)).
  int first_expert(int g, int groups) const { return int(int64_t(g) * local / groups); }
  // The elements (rows · C) of group [j0, j1)'s exchange with each rank and where they sit: on
  // the token side, in the slots sorted by expert (`token`), or on the expert side, in the rows
  // as they arrive by sending rank (the blocking exchange's layout, which reorder reads).
  void group_layout(int j0, int j1, int C, bool token, int64_t* counts, int64_t* displs) const {
    int64_t before = 0;  // rows of the ranks before r (expert side)
    for (int r = 0; r < ranks; ++r) {
      int64_t n = 0, at = 0;
      if (token) {
        for (int e = 0; e < r * local + j0; ++e) at += sent[e];
        for (int j = j0; j < j1; ++j) n += sent[r * local + j];
      } else {
        at = before;
        for (int j = 0; j < j0; ++j) at += received[r * local + j];
        for (int j = j0; j < j1; ++j) n += received[r * local + j];
        before += received_from(r);
      }
      counts[r] = n * C;
      displs[r] = at * C;
    }
  }
};

// The exchanges of an overlapped dispatch (--moe-a2a-chunks G): the local experts in G groups,
// each group's rows sent on an all-to-all of their own, all posted at once (one group's posted
// only as the one before starts computing waits, measured, for the peer's next MPI call, a
// product away), and each group's outputs sent back as soon as its experts are done, while the
// next group computes. Every expert still multiplies all its rows in one product in the same
// order, so the bits are the blocking dispatch's; only when the bytes move changes. MPI moves a
// nonblocking exchange on inside MPI calls, so the experts' loop calls progress() between its
// products.
class OverlappedDispatch {
 public:
  OverlappedDispatch(const Dispatch& d, int groups, int C)
      : d_(d), groups_(groups), out_(size_t(groups)), back_(size_t(groups)) {
    const size_t n = size_t(d.ranks) * size_t(groups);
    token_counts_.resize(n), token_displs_.resize(n);
    expert_counts_.resize(n), expert_displs_.resize(n);
    for (int g = 0; g < groups; ++g) {
      const int j0 = d.first_expert(g, groups), j1 = d.first_expert(g + 1, groups);
      const size_t at = size_t(g) * size_t(d.ranks);
      d.group_layout(j0, j1, C, true, &token_counts_[at], &token_displs_[at]);
      d.group_layout(j0, j1, C, false, &expert_counts_[at], &expert_displs_[at]);
    }
  }
  int groups() const { return groups_; }
  int first_expert(int g) const { return d_.first_expert(g, groups_); }
  // Group g's rows out: from the token side's slots to the expert side's arrivals.
  template <class Rows>
  void send_out(int g, Rows token, Rows arrived) {
    const profile::Scope scope("mpi all-to-all (experts)");
    const size_t at = size_t(g) * size_t(d_.ranks);
    out_[size_t(g)].start(token.data(), &token_counts_[at], &token_displs_[at], arrived.data(),
                          &expert_counts_[at], &expert_displs_[at], d_.comm);
  }
  void wait_out(int g) {
    const profile::Scope scope("mpi all-to-all (experts)");
    out_[size_t(g)].wait();
  }
  // Group g's results back, from the arrivals' rows to the token side's slots.
  template <class Rows>
  void send_back(int g, Rows arrived, Rows token) {
    const profile::Scope scope("mpi all-to-all (experts)");
    const size_t at = size_t(g) * size_t(d_.ranks);
    back_[size_t(g)].start(arrived.data(), &expert_counts_[at], &expert_displs_[at], token.data(),
                           &token_counts_[at], &token_displs_[at], d_.comm);
  }
  void wait_back() {
    const profile::Scope scope("mpi all-to-all (experts)");
    for (PendingAlltoallv& p : back_) p.wait();
  }
  void progress() {
    for (PendingAlltoallv& p : out_) {
      if (p.active()) p.test();
    }
    for (PendingAlltoallv& p : back_) {
      if (p.active()) p.test();
    }
  }

 private:
  const Dispatch& d_;
  int groups_;
  std::vector<int64_t> token_counts_, token_displs_, expert_counts_, expert_displs_;
  std::vector<PendingAlltoallv> out_, back_;
};

// A block's dispatch from the counts its forward sorted and exchanged.
Dispatch dispatch_of(const MoeLayer& m, const TpShard& s) {
  Dispatch d;
  d.ranks = s.ep_size;
  d.local = s.experts;
  d.sent = m.host_counts;
  d.received = m.host_received;
  d.comm = m.ep;
  return d;
}

// The dispatch of a block whose token side has just sorted its slots: with EP, each EP rank
// learns how many rows each other sends to each of its experts (MPI_Alltoall on the host).
Dispatch plan_dispatch(const MoeLayer& m, const TpShard& s) {
  const Dispatch d = dispatch_of(m, s);
  if (d.ranks == 1) {
    std::copy(m.host_counts, m.host_counts + s.cfg.experts, m.host_received);
  } else {
    const profile::Scope scope("mpi all-to-all (experts)");
    MPF_MPI_CHECK(MPI_Alltoall(m.host_counts, d.local, MPI_INT64_T, m.host_received, d.local,
                               MPI_INT64_T, d.comm));
  }
  return d;
}

// Where a dispatch's rows sit: the rows as sent and as received (EP only).
Tensor sent_rows(const LayerActivations& a, int64_t n, int C) {
  return rows(a.moe_scratch, 0, n, C);
}
Tensor received_rows(const LayerActivations& a, int64_t n, int C) {
  return Tensor(a.moe_scratch.data() + a.moe_scratch.extent(0) / 2, n * C);
}
// The same buffers holding bf16 rows (the experts' inputs kept in bf16).
Tensor16 as_bf16(const Tensor& t) {
  return Tensor16(reinterpret_cast<bf16*>(t.data()), int64_t(t.extent(0)));
}

// The experts' inputs of a set that keeps them in bf16 (bf16_kept): ln2's rows, rounded as they
// are gathered (the bits an expert's first product would read from fp32 rows), by local expert.
// Under EP they travel rounded, in half the bytes.
void dispatch_bf16(const LayerActivations& a, const Dispatch& d, int64_t received, int C,
                   const MoeShape& shape) {
  if (d.ranks == 1) {
    moe_gather(a.moe_in_bf16, a.ln2, a.moe.order, C, shape);
    return;
  }
  const Tensor16 sent = as_bf16(sent_rows(a, shape.slots(), C)),
                 arrived = as_bf16(received_rows(a, received, C));
  moe_gather(sent, a.ln2, a.moe.order, C, shape);
  d.exchange(sent, arrived, C, /*back=*/false);
  d.reorder(a.moe_in_bf16, arrived, C, /*to_experts=*/true);
}

// Qwen2-MoE's shared expert on every row, this rank's share of its width, and its gate,
// sigmoid(x · sgatew) (the gate's product in fp32, as the router's); add_shared_expert adds the
// gated output to `sum`. Kept in bf16 (bf16_kept), its [gate | up] and output are the products'
// bf16 outputs, as autocast's.
void shared_expert_products(const LayerActivations& a, const LayerParameters& p, const TpShard& s,
                            int64_t R) {
  const int C = s.cfg.channels, Fs = s.shared_fc;
  const Tensor none;
  const bool kept16 = a.shared_out_bf16.extent(0) > 0;
  if (kept16) {
    linear_forward(a.shared_fch_bf16, a.ln2, p.sfcw, R, C, 2 * Fs);
    swiglu_forward(a.shared_h_bf16, a.shared_fch_bf16, R, Fs);
    linear_forward(a.shared_out_bf16, a.shared_h_bf16, p.sfcprojw, R, Fs, C);
  } else {
    linear_forward(a.shared_fch, none, a.ln2, p.sfcw, none, R, C, 2 * Fs);
    swiglu_forward(a.shared_h, a.shared_fch, R, Fs);
    linear_forward(a.shared_out, none, a.shared_h, p.sfcprojw, none, R, Fs, C);
  }
  if (s.cfg.features().shared_expert_gate) {
    {
      const Fp32Products fp32;
      linear_forward(a.shared_gate, none, a.ln2, p.sgatew, none, R, C, 1);
    }
    sigmoid_gate_forward(a.shared_gate, R);
  } else {  // DeepSeekMoE's shared experts join ungated: a gate of 1
    fill(a.shared_gate.data(), R, 1.0f);
  }
}

void add_shared_expert(Tensor sum, const LayerActivations& a, const TpShard& s, int64_t R) {
  const int C = s.cfg.channels;
  if (a.shared_out_bf16.extent(0) > 0) {
    add_gated_rows(sum, a.shared_out_bf16, a.shared_gate, R, C);
  } else {
    add_gated_rows(sum, a.shared_out, a.shared_gate, R, C);
  }
}

// Its backward from g (R,C), the MLP output's gradient: the gate's logit's gradient (summed over
// TP, where the output is split), the gated output's and the [gate | up]'s for W, and its input
// gradient added to dln2 (the gate's part on TP rank 0 only, as the router's), through `scratch`
// (R,C) and dh (R,Fs_l).
void shared_expert_backward(Tensor dln2, Tensor scratch, Tensor dh, const BlockWeightInputs& w,
                            Tensor g, const LayerActivations& a, const LayerParameters& p,
                            const TpShard& s, int64_t R, MPI_Comm tp) {
  const int C = s.cfg.channels, Fs = s.shared_fc;
  const bool kept16 = a.shared_out_bf16.extent(0) > 0;
  if (kept16) {
    gated_rows_backward(w.shared_dgate, w.shared_dout, g, a.shared_out_bf16, a.shared_gate, R, C);
  } else {
    gated_rows_backward(w.shared_dgate, w.shared_dout, g, a.shared_out, a.shared_gate, R, C);
  }
  const bool gated = s.cfg.features().shared_expert_gate;
  if (gated) {
    allreduce_sum(w.shared_dgate.data(), R, tp);
    sigmoid_gate_backward(w.shared_dgate, a.shared_gate, R);
  }
  linear_backward_input(dh, w.shared_dout, p.sfcprojw, R, Fs, C);
  if (kept16) {
    swiglu_backward_input(w.shared_dfch, dh, a.shared_fch_bf16, R, Fs);
  } else {
    swiglu_backward_input(w.shared_dfch, dh, a.shared_fch, R, Fs);
  }
  const Tensor dx = rows(scratch, 0, R, C);
  linear_backward_input(dx, w.shared_dfch, p.sfcw, R, C, 2 * Fs);
  add_into(dln2, dx.data(), R * C);
  if (gated && s.rank == 0) {
    const Fp32Products fp32;
    linear_backward_input(dx, w.shared_dgate, p.sgatew, R, C, 1);
    add_into(dln2, dx.data(), R * C);
  }
}

// Its weights' gradients (added), the gate's products in fp32 as its forward.
void shared_expert_backward_weight(const LayerParameters& g, const BlockWeightInputs& w,
                                   const LayerActivations& a, const TpShard& s, int64_t R) {
  const int C = s.cfg.channels, Fs = s.shared_fc;
  const Tensor none;
  if (a.shared_out_bf16.extent(0) > 0) {  // SwiGLU's output formed again unless kept (--recompute)
    if (a.recompute_h) swiglu_forward(a.shared_h_bf16, a.shared_fch_bf16, R, Fs);
    linear_backward_weight(g.sfcprojw, none, w.shared_dout, a.shared_h_bf16, R, Fs, C);
  } else {
    linear_backward_weight(g.sfcprojw, none, w.shared_dout, a.shared_h, R, Fs, C);
  }
  linear_backward_weight(g.sfcw, none, w.shared_dfch, a.ln2, R, C, 2 * Fs);
  if (!s.cfg.features().shared_expert_gate) return;
  const Fp32Products fp32;
  linear_backward_weight(g.sgatew, none, w.shared_dgate, a.ln2, R, C, 1);
}
// Local expert e's SwiGLU MLP on its n rows from `first` of the experts' inputs, its outputs into
// y (or y16 where the set keeps bf16: written rounded, as autocast's; SwiGLU's output in the
// scratch); between its products, progress() (an overlapped dispatch's exchanges move on).
template <class Progress>
void expert_forward(const LayerActivations& a, const LayerParameters& p, const TpShard& s, int e,
                    int64_t first, int64_t n, Tensor y, Tensor16 y16, Progress&& progress) {
  const int C = s.cfg.channels;
  const Tensor none;
  if (a.moe_in_bf16.extent(0) > 0) {
    const Tensor16 fch = rows(a.fch_bf16, first, n, s.mlp_in);
    const Tensor16 h = rows(a.fch_gelu_bf16, first, n, s.fc);
    linear_forward(fch, rows(a.moe_in_bf16, first, n, C), expert_fcw(p, s, e), n, C, s.mlp_in);
    progress();
    swiglu_forward(h, fch, n, s.fc);
    linear_forward(rows(y16, first, n, C), h, expert_fcprojw(p, s, e), n, s.fc, C);
    progress();
    return;
  }
  const Tensor fch = rows(a.fch, first, n, s.mlp_in);
  const Tensor h = rows(a.fch_gelu, first, n, s.fc);
  linear_forward(fch, none, rows(a.moe_in, first, n, C), expert_fcw(p, s, e), none, n, C, s.mlp_in);
  progress();
  swiglu_forward(h, fch, n, s.fc);
  linear_forward(rows(y, first, n, C), none, h, expert_fcprojw(p, s, e), none, n, s.fc, C);
  progress();
}

// The rows of each local expert from `first` on, by expert (expert_first[j]).
std::vector<int64_t> expert_firsts(const std::vector<int64_t>& per_expert) {
  std::vector<int64_t> first(per_expert.size() + 1, 0);
  for (size_t j = 0; j < per_expert.size(); ++j) first[j + 1] = first[j] + per_expert[j];
  return first;
}

// The experts' forward with each all-to-all blocking (or none, without EP): every slot's output
// in moe_out on the token side, in expert order.
void experts_forward(const LayerActivations& a, const Dispatch& d, const LayerParameters& p,
                     const TpShard& s, const MoeShape& shape, int64_t received) {
  const int C = s.cfg.channels;
  const bool ep = d.ranks > 1;
  const bool kept16 = a.moe_in_bf16.extent(0) > 0;  // moe_in and fch in bf16 (bf16_kept)
  if (kept16) {
    dispatch_bf16(a, d, received, C, shape);
  } else if (ep) {
    const Tensor sent = sent_rows(a, shape.slots(), C), arrived = received_rows(a, received, C);
    moe_gather(sent, a.ln2, a.moe.order, C, shape);
    d.exchange(sent, arrived, C, /*back=*/false);
    d.reorder(a.moe_in, arrived, C, /*to_experts=*/true);
  } else {
    moe_gather(a.moe_in, a.ln2, a.moe.order, C, shape);
  }
  // The experts' outputs (by local expert): in moe_out, or under EP in the scratch until they go
  // back; in bf16 with kept16, as the down product writes them.
  const Tensor y = ep ? sent_rows(a, received, C) : a.moe_out;
  const Tensor16 y16 = ep ? as_bf16(sent_rows(a, received, C)) : a.moe_out_bf16;
  const std::vector<int64_t> per_expert = d.expert_rows();
  for_each_expert(per_expert.data(), d.local, [&](int e, int64_t first, int64_t n) {
    expert_forward(a, p, s, e, first, n, y, y16, [] {});
  });
  if (ep && kept16) {  // back in bf16: half the bytes
    const Tensor16 arrived = as_bf16(received_rows(a, received, C));
    d.reorder(arrived, y16, C, /*to_experts=*/false);
    d.exchange(arrived, a.moe_out_bf16, C, /*back=*/true);
  } else if (ep) {
    const Tensor arrived = received_rows(a, received, C);
    d.reorder(arrived, y, C, /*to_experts=*/false);
    d.exchange(arrived, a.moe_out, C, /*back=*/true);
  }
}

// The EP forward with its all-to-alls overlapped (OverlappedDispatch): the token side's slots
// gathered into moe_out, which the outputs come back into (each group's slots are sent before
// its outputs arrive, and no two groups share a slot), the experts' inputs arriving where the
// blocking dispatch's do, their outputs in the scratch's first half. bf16 rows where the set
// keeps bf16.
// `meanwhile` runs while the last group's outputs travel.
void experts_forward_overlapped(const LayerActivations& a, const Dispatch& d,
                                const LayerParameters& p, const TpShard& s, const MoeShape& shape,
                                int64_t received, const std::function<void()>& meanwhile) {
  const int C = s.cfg.channels;
  const bool kept16 = a.moe_in_bf16.extent(0) > 0;
  OverlappedDispatch x(d, std::min(s.a2a_chunks, d.local), C);
  const Tensor arrived = received_rows(a, received, C), y = sent_rows(a, received, C);
  const Tensor16 arrived16 = as_bf16(arrived), y16 = as_bf16(y);
  auto send_out = [&](int g) {
    if (kept16) {
      x.send_out(g, a.moe_out_bf16, arrived16);
    } else {
      x.send_out(g, a.moe_out, arrived);
    }
  };
  if (kept16) {
    moe_gather(a.moe_out_bf16, a.ln2, a.moe.order, C, shape);
  } else {
    moe_gather(a.moe_out, a.ln2, a.moe.order, C, shape);
  }
  for (int g = 0; g < x.groups(); ++g) send_out(g);
  const std::vector<int64_t> per_expert = d.expert_rows();
  const std::vector<int64_t> first = expert_firsts(per_expert);
  for (int g = 0; g < x.groups(); ++g) {
    const int j0 = x.first_expert(g), j1 = x.first_expert(g + 1);
    x.wait_out(g);
    if (kept16) {
      d.reorder(a.moe_in_bf16, arrived16, C, /*to_experts=*/true, j0, j1);
    } else {
      d.reorder(a.moe_in, arrived, C, /*to_experts=*/true, j0, j1);
    }
    for (int j = j0; j < j1; ++j) {
      const int64_t n = per_expert[size_t(j)];
      if (n > 0) expert_forward(a, p, s, j, first[size_t(j)], n, y, y16, [&] { x.progress(); });
    }
    if (kept16) {
      d.reorder(arrived16, y16, C, /*to_experts=*/false, j0, j1);
      x.send_back(g, arrived16, a.moe_out_bf16);
    } else {
      d.reorder(arrived, y, C, /*to_experts=*/false, j0, j1);
      x.send_back(g, arrived, a.moe_out);
    }
  }
  meanwhile();
  x.wait_back();
}
// The experts' backward with each all-to-all blocking (or none): the gated output gradients in
// buf.moe_dy (token side, expert order) to the experts' input gradients there.
void experts_backward(const BackwardBuffers& buf, const BlockWeightInputs& w,
                      const LayerActivations& a, const Dispatch& d, const LayerParameters& p,
                      const TpShard& s, const MoeShape& shape, int64_t received) {
  const int C = s.cfg.channels;
  const bool ep = d.ranks > 1;
  const Tensor dy = buf.moe_dy;
  const std::vector<int64_t> per_expert = d.expert_rows();
  if (ep) {
    const Tensor arrived = received_rows(a, received, C);
    d.exchange(dy, arrived, C, /*back=*/false);
    d.reorder(w.dout, arrived, C, /*to_experts=*/true);
  } else {
    copy_into(w.dout, dy.data(), shape.slots() * C);
  }
  for_each_expert(per_expert.data(), d.local, [&](int e, int64_t first, int64_t n) {
    linear_backward_input(rows(buf.dmlp, first, n, s.fc), rows(w.dout, first, n, C),
                          expert_fcprojw(p, s, e), n, s.fc, C);
  });
  if (a.fch_bf16.extent(0) > 0) {
    swiglu_backward_input(w.dfch, buf.dmlp, a.fch_bf16, received, s.fc);
  } else {
    swiglu_backward_input(w.dfch, buf.dmlp, a.fch, received, s.fc);
  }
  // The experts' input gradients, back on the token side in dy (free now).
  const Tensor dx = ep ? sent_rows(a, received, C) : dy;
  for_each_expert(per_expert.data(), d.local, [&](int e, int64_t first, int64_t n) {
    linear_backward_input(rows(dx, first, n, C), rows(w.dfch, first, n, s.mlp_in),
                          expert_fcw(p, s, e), n, C, s.mlp_in);
  });
  if (ep) {
    const Tensor arrived = received_rows(a, received, C);
    d.reorder(arrived, dx, C, /*to_experts=*/false);
    d.exchange(arrived, dy, C, /*back=*/true);
  }
}

// The same with the all-to-alls overlapped (OverlappedDispatch), group by group: a group's
// output gradients arrive while the one before computes, and its input gradients go back into
// its own slots of dy (sent already) while the next computes. SwiGLU's gradient is elementwise,
// so taking it a group's rows at a time changes no bit.
// `meanwhile` runs while the last group's input gradients travel.
void experts_backward_overlapped(const BackwardBuffers& buf, const BlockWeightInputs& w,
                                 const LayerActivations& a, const Dispatch& d,
                                 const LayerParameters& p, const TpShard& s, int64_t received,
                                 const std::function<void()>& meanwhile) {
  const int C = s.cfg.channels;
  const Tensor dy = buf.moe_dy;
  OverlappedDispatch x(d, std::min(s.a2a_chunks, d.local), C);
  const Tensor arrived = received_rows(a, received, C), dx = sent_rows(a, received, C);
  for (int g = 0; g < x.groups(); ++g) x.send_out(g, dy, arrived);
  const std::vector<int64_t> per_expert = d.expert_rows();
  const std::vector<int64_t> first = expert_firsts(per_expert);
  for (int g = 0; g < x.groups(); ++g) {
    const int j0 = x.first_expert(g), j1 = x.first_expert(g + 1);
    x.wait_out(g);
    d.reorder(w.dout, arrived, C, /*to_experts=*/true, j0, j1);
    for (int j = j0; j < j1; ++j) {
      const int64_t f = first[size_t(j)], n = per_expert[size_t(j)];
      if (n == 0) continue;
      linear_backward_input(rows(buf.dmlp, f, n, s.fc), rows(w.dout, f, n, C),
                            expert_fcprojw(p, s, j), n, s.fc, C);
      x.progress();
    }
    const int64_t f = first[size_t(j0)], n = first[size_t(j1)] - f;
    if (n > 0 && a.fch_bf16.extent(0) > 0) {
      swiglu_backward_input(rows(w.dfch, f, n, s.mlp_in), rows(buf.dmlp, f, n, s.fc),
                            rows(a.fch_bf16, f, n, s.mlp_in), n, s.fc);
    } else if (n > 0) {
      swiglu_backward_input(rows(w.dfch, f, n, s.mlp_in), rows(buf.dmlp, f, n, s.fc),
                            rows(a.fch, f, n, s.mlp_in), n, s.fc);
    }
    for (int j = j0; j < j1; ++j) {
      const int64_t fj = first[size_t(j)], nj = per_expert[size_t(j)];
      if (nj == 0) continue;
      linear_backward_input(rows(dx, fj, nj, C), rows(w.dfch, fj, nj, s.mlp_in),
                            expert_fcw(p, s, j), nj, C, s.mlp_in);
      x.progress();
    }
    d.reorder(arrived, dx, C, /*to_experts=*/false, j0, j1);
    x.send_back(g, arrived, dy);
  }
  meanwhile();
  x.wait_back();
}

}  // namespace

void moe_mlp_forward(const LayerActivations& a, Tensor out, Tensor partial, Tensor residual,
                     const LayerParameters& p, const TpShard& s, const tp::SequenceSplit& seq,
                     MPI_Comm tp) {
  const GPTConfig& cfg = s.cfg;
  const int C = cfg.channels, E = cfg.experts;
  const int64_t R = seq.rows;
  MoeShape shape = moe_shape(a, s, R);
  if (cfg.moe_noaux) shape.bias = p.moebias.data();
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
  // To the experts' ranks (EP), each local expert's SwiGLU MLP on its rows, this rank's share
  // of the width, and back: moe_out holds each slot's output on the token side, in expert order.
  const Dispatch d = plan_dispatch(a.moe, s);
  const int64_t received = d.total_received();
  const bool kept16 = a.moe_in_bf16.extent(0) > 0;  // moe_in and fch in bf16 (bf16_kept)
  // The shared expert's products need no exchanged row: overlapped, they run while the outputs
  // travel back; its gated output joins after the routed ones either way.
  auto shared_products = [&] {
    if (cfg.shared_expert()) shared_expert_products(a, p, s, R);
  };
  if (d.ranks > 1 && s.a2a_chunks > 1) {
    experts_forward_overlapped(a, d, p, s, shape, received, shared_products);
  } else {
    experts_forward(a, d, p, s, shape, received);
    shared_products();
  }
  // The gated outputs, a token's slots in order, then the shared expert's, join the residual
  // leaving the region.
  const Tensor sum = seq.on ? partial : out;
  seed_rows(sum, residual, none, seq, s.rank, C);
  if (kept16) {
    moe_combine(sum, a.moe_out_bf16, a.gates, a.moe.where, C, shape);
  } else {
    moe_combine(sum, a.moe_out, a.gates, a.moe.where, C, shape);
  }
  if (cfg.shared_expert()) add_shared_expert(sum, a, s, R);
  tp::leave_forward(sum.data(), out.data(), C, seq, tp);
  join_rows(out, residual, none, seq, C);
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
  // The experts' rows as the forward dispatched them (its counts; no new exchange of counts).
  const Dispatch d = dispatch_of(a.moe, s);
  const bool ep = d.ranks > 1;
  const int64_t received = d.total_received();
  const std::vector<int64_t> per_expert = d.expert_rows();
  std::copy(per_expert.begin(), per_expert.end(), w.counts);  // for W: a recomputation may
                                                              // reroute a.moe meanwhile
  // Each slot's output gradient; the gates' gradients, dy · y (summed over TP: y is a partial
  // sum over the expert width); the gated gradients go to the experts.
  const Tensor dy = buf.moe_dy;
  moe_gather(dy, g, a.moe.order, C, shape);
  if (a.moe_out_bf16.extent(0) > 0) {
    moe_gate_grads(buf.dgates, dy, a.moe_out_bf16, a.moe.order, C, shape);
  } else {
    moe_gate_grads(buf.dgates, dy, a.moe_out, a.moe.order, C, shape);
  }
  allreduce_sum(buf.dgates.data(), shape.slots(), tp);
  moe_scale_rows(dy, a.gates, a.moe.order, C, shape);
  // The router's share of the input gradient needs no exchanged row: overlapped, it runs while
  // the experts' input gradients travel back.
  auto router_backward = [&] {
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
  };
  if (ep && s.a2a_chunks > 1) {
    experts_backward_overlapped(buf, w, a, d, p, s, received, router_backward);
  } else {
    experts_backward(buf, w, a, d, p, s, shape, received);
    router_backward();
  }
  moe_combine(dln2, dy, Tensor(), a.moe.where, C, shape);
  if (cfg.shared_expert()) shared_expert_backward(dln2, dy, buf.dshared_h, w, g, a, p, s, R, tp);
}

void moe_mlp_backward_weight(const LayerParameters& g, const BlockWeightInputs& w,
                             const LayerActivations& a, const TpShard& s,
                             const tp::SequenceSplit& seq) {
  const GPTConfig& cfg = s.cfg;
  const int C = cfg.channels;
  const Tensor none;
  const bool kept16 = a.moe_in_bf16.extent(0) > 0;  // moe_in and fch in bf16 (bf16_kept)
  if (kept16 && a.recompute_h) {  // SwiGLU's output not kept: formed from fch as the forward did
    int64_t rows_in = 0;
    for (int e = 0; e < s.experts; ++e) rows_in += w.counts[e];
    swiglu_forward(a.fch_gelu_bf16, a.fch_bf16, rows_in, s.fc);
  }
  for_each_expert(w.counts, s.experts, [&](int e, int64_t first, int64_t n) {
    if (kept16) {
      linear_backward_weight(expert_fcprojw(g, s, e), none, rows(w.dout, first, n, C),
                             rows(a.fch_gelu_bf16, first, n, s.fc), n, s.fc, C);
      linear_backward_weight(expert_fcw(g, s, e), none, rows(w.dfch, first, n, s.mlp_in),
                             rows(a.moe_in_bf16, first, n, C), n, C, s.mlp_in);
      return;
    }
    linear_backward_weight(expert_fcprojw(g, s, e), none, rows(w.dout, first, n, C),
                           rows(a.fch_gelu, first, n, s.fc), n, s.fc, C);
    linear_backward_weight(expert_fcw(g, s, e), none, rows(w.dfch, first, n, s.mlp_in),
                           rows(a.moe_in, first, n, C), n, C, s.mlp_in);
  });
  if (cfg.shared_expert()) shared_expert_backward_weight(g, w, a, s, seq.rows);
  const Fp32Products fp32;  // the router's products all in fp32, as its forward
  linear_backward_weight(g.routerw, none, w.drouter, a.ln2, seq.rows, C, cfg.experts);
}

}  // namespace mpf
