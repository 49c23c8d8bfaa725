#include "model/mtp.hpp"

#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/transfer.hpp"
#include "model/block_gate.hpp"
#include "model/block_parts.hpp"
#include "model/gpt.hpp"
#include "model/layers/cross_entropy.hpp"
#include "model/layers/encoder.hpp"
#include "model/layers/linear.hpp"
#include "model/layers/rmsnorm.hpp"
#include "parallel/device_mpi.hpp"
#include "parallel/tp_regions.hpp"

namespace mpf {

namespace {
// out[b,i] = in[b,i+k] inside the row, 0 past its end.
void shift_tokens(const Tokens& out, const Tokens& in, int B, int T, int k) {
  const Tokens o = out, x = in;
  for_each(
      "mpf::mtp_shift", int64_t(B) * T, KOKKOS_LAMBDA(int64_t n) {
        const int64_t i = n % T;
        o(n) = i + k < T ? x(n + k) : 0;
      });
}
// cat (R,2C) rows [a | b] from a, b (R,C); and back.
void join_halves(Tensor cat, Tensor a, Tensor b, int64_t R, int C) {
  for_each(
      "mpf::mtp_join", R * 2 * C, KOKKOS_LAMBDA(int64_t n) {
        const int64_t r = n / (2 * C), c = n % (2 * C);
        cat(n) = c < C ? a(r * C + c) : b(r * C + c - C);
      });
}
void split_halves(Tensor a, Tensor b, Tensor cat, int64_t R, int C) {
  for_each(
      "mpf::mtp_split", R * 2 * C, KOKKOS_LAMBDA(int64_t n) {
        const int64_t r = n / (2 * C), c = n % (2 * C);
        if (c < C) {
          a(r * C + c) = cat(n);
        } else {
          b(r * C + c - C) = cat(n);
        }
      });
}
// Whether local row n of (B, rows) has a target at depth k: its position in the sequence of
// `total` tokens (PositionRuns: CP's two chunks) below total - k.
KOKKOS_INLINE_FUNCTION bool has_target(const PositionRuns& at, int64_t n, int total, int k) {
  return at.position(int(n % at.rows)) < total - k;
}
// The rows without a target (the last k of each sequence): no gradient. Logits: fp32, or bf16
// (kept so under --precision bf16). A thread per piece of 1,024 columns of a row: only k rows a
// sequence write, and asking each element for its row's position took 3.6% of a step on a CPU.
template <class Logits>
void zero_rows_past_end(Logits logits, const PositionRuns& at, int total, int k, int64_t width) {
  using Elem = typename Logits::value_type;
  constexpr int64_t kPiece = 1024;
  const int64_t rows = int64_t(logits.extent(0)) / width, pieces = (width + kPiece - 1) / kPiece;
  for_each(
      "mpf::mtp_no_target", rows * pieces, KOKKOS_LAMBDA(int64_t i) {
        const int64_t r = i / pieces, begin = (i % pieces) * kPiece;
        if (has_target(at, r, total, k)) return;
        const int64_t end = begin + kPiece < width ? begin + kPiece : width;
        for (int64_t c = begin; c < end; ++c) logits(r * width + c) = Elem{};
      });
}
// load[e] += the choices of expert e by this rank's rows that have a target, as the report's
// B x (T - k) positions route (the bias update reads the loads).
void add_valid_load(float* load, const LayerActivations& x, int64_t R, const PositionRuns& at,
                    int total, int k, int E, int K) {
  const int32_t* choice = x.moe.choice;
  for_each(
      "mpf::mtp_load", E, KOKKOS_LAMBDA(int64_t e) {
        float n = 0.0f;
        for (int64_t r = 0; r < R; ++r) {
          if (!has_target(at, r, total, k)) continue;
          for (int j = 0; j < K; ++j) n += choice[r * K + j] == e ? 1.0f : 0.0f;
        }
        load[e] += n;
      });
}
// The head's parameters as depth k sees them: the shared LM head, shared_head.norm for lnf.
ParameterTensors head_of(const ParameterTensors& p, const LayerParameters& module) {
  ParameterTensors h;
  h.wte = p.wte;
  h.lmhead = p.lmhead;
  h.lnfw = module.mtpshw;
  return h;
}
// ZeRO-2/3 (BlockGate): block l's views pointed at whole copies before they are read or its
// gradients written, and its gradients sent off after its W.
void enter(const ParameterTensors& params, int l, BlockGate::Use use) {
  if (params.gate) params.gate->enter(l, use, -1);
}
Tensor view(const Slab& s) {
  return Tensor(s.data(), int64_t(s.extent(0)));
}
}  // namespace

MtpModules::MtpModules(const TpShard& shard, int B, int T, float weight, MPI_Comm cp,
                       const PositionRuns& positions, const Allocate& allocate)
    : shard_(shard),
      B_(B),
      T_(T),
      D_(shard.cfg.mtp),
      first_(shard.local_layers() - shard.cfg.mtp),
      weight_(weight),
      cp_(cp),
      at_(positions) {
  int ranks = 1;
  MPI_Comm_size(cp, &ranks);
  total_ = T * ranks;
  if (ranks > 1) {  // every CP rank's rows' positions, to place their tokens in the sequence
    runs_.resize(size_t(ranks));
    MPF_MPI_CHECK(MPI_Allgather(&at_, int(sizeof at_), MPI_BYTE, runs_.data(), int(sizeof at_),
                                MPI_BYTE, cp));
  }
  const int64_t R = int64_t(B) * T, C = shard.cfg.channels;
  for (int k = 1; k <= D_; ++k) {
    ChunkPieces chunk;
    chunk.first_layer = first_ + k - 1;
    chunk.layers = 1;
    chunk.embedding = false;
    chunk.head = true;
    Depth d;
    d.acts = allocate(chunk);
    d.tokens = Tokens("mpf::mtp_tokens", R);
    d.targets = Tokens("mpf::mtp_targets", R);
    d.emb = Slab("mpf::mtp_emb", R * C);
    d.cat = Slab("mpf::mtp_cat", R * 2 * C);
    d.rstd_e = Slab("mpf::mtp_rstd_e", R);
    d.rstd_h = Slab("mpf::mtp_rstd_h", R);
    depths_.push_back(std::move(d));
  }
  ChunkPieces chunk;
  chunk.first_layer = first_;
  chunk.layers = 1;
  chunk.embedding = false;
  chunk.head = true;
  const bool sp = depths_.empty() ? false : depths_.front().acts->seq.on;
  w_ = std::make_unique<WeightGradInputs>(WeightGradInputs::allocate(shard, chunk, B, T, sp));
  dcat_ = Slab("mpf::mtp_dcat", R * 2 * C);
  dout_ = Slab("mpf::mtp_dout", R * C);
  partial_ = Slab("mpf::mtp_partial", R * C);
  dh_ = Slab("mpf::mtp_dh", R * C);
  dprev_ = Slab("mpf::mtp_dprev", R * C);
  demb_ = Slab("mpf::mtp_demb", R * C);
  dnext_ = Slab("mpf::mtp_dnext", R * C);
}

int64_t MtpModules::bytes(const TpShard& shard, int B, int T, bool sequence_parallel, bool bf16) {
  const int D = shard.has_head ? shard.cfg.mtp : 0;
  if (D == 0) return 0;
  const int64_t R = int64_t(B) * T, C = shard.cfg.channels, f = sizeof(float);
  ChunkPieces chunk;
  chunk.layers = 1;
  chunk.embedding = false;
  chunk.bf16 = bf16;
  int64_t n = 0;
  for (int k = 1; k <= D; ++k) {
    chunk.first_layer = shard.local_layers() - D + k - 1;
    n += Activations::bytes(shard, chunk, B, T, sequence_parallel);
    n += 2 * R * int64_t(sizeof(int32_t)) + (R * C + 2 * R * C + 2 * R) * f;  // tokens .. rstd
  }
  chunk.first_layer = shard.local_layers() - D;
  chunk.bf16 = false;
  n += WeightGradInputs::bytes(shard, chunk, B, T, sequence_parallel);
  return n + (2 * R * C + 6 * R * C) * f;  // dcat, then dh .. partial
}

void MtpModules::shift_across_chunks(Depth& d, const Tokens& targets, int k) {
  // Under CP a chunk's shifted tokens run into the next chunk, another rank's: every rank's
  // targets gathered (t_{g+1} at position g), the whole sequences laid out, this rank's rows'
  // t_{g+k} (the target at g + k - 1) and t_{g+k+1} taken from them.
  const int ranks = int(runs_.size());
  const int64_t local = int64_t(B_) * T_;
  const size_t n_local = static_cast<size_t>(local);
  std::vector<int32_t> mine(n_local), all(n_local * size_t(ranks));
  std::vector<int32_t> whole(static_cast<size_t>(B_) * size_t(total_)), tokens(n_local),
      ahead(n_local);
  copy_to_host(mine.data(), targets.data(), mine.size() * sizeof(int32_t), "d2h mtp targets");
  MPF_MPI_CHECK(MPI_Allgather(mine.data(), int(local), MPI_INT32_T, all.data(), int(local),
                              MPI_INT32_T, cp_));
  for (int r = 0; r < ranks; ++r) {
    for (int64_t n = 0; n < local; ++n) {
      const int64_t b = n / T_;
      whole[size_t(b * total_ + runs_[size_t(r)].position(int(n % T_)))] =
          all[size_t(r * local + n)];
    }
  }
  for (int64_t n = 0; n < local; ++n) {
    const int64_t b = n / T_, g = at_.position(int(n % T_));
    const bool inside = g + k < total_;
    tokens[size_t(n)] = inside ? whole[size_t(b * total_ + g + k - 1)] : 0;
    ahead[size_t(n)] = inside ? whole[size_t(b * total_ + g + k)] : 0;
  }
  copy_from_host(d.tokens.data(), tokens.data(), tokens.size() * sizeof(int32_t), "h2d mtp tokens");
  copy_from_host(d.targets.data(), ahead.data(), ahead.size() * sizeof(int32_t), "h2d mtp targets");
}

void MtpModules::forward_depth(int k, const Tensor& h_prev, const ParameterTensors& params,
                               MPI_Comm tp) {
  Depth& d = depths_[size_t(k - 1)];
  Activations& a = *d.acts;
  const LayerParameters& m = params.blocks[size_t(first_ + k - 1)];
  const int C = shard_.cfg.channels;
  // This rank's rows of the residual stream: all of them, or its share under SP.
  const int64_t Rl = a.seq.local_rows;
  const float eps = shard_.cfg.norm_eps;
  // The embedding of t_{i+k}: each rank's vocabulary shard's part of every row, summed over TP
  // into this rank's rows (as the trunk's embedding leaves its region).
  const Tensor partial = a.seq.on ? view(partial_) : view(d.emb);
  encoder_forward(partial, d.tokens, params.wte, Tensor(), B_, T_, C, shard_.vocab_begin,
                  shard_.vocab_shard, false, a.positions);
  tp::leave_forward(partial.data(), d.emb.data(), C, a.seq, tp);
  // [enorm(emb) | hnorm(h)] into cat (the normalised halves in dcat's scratch first).
  const Tensor emb(d.emb.data(), Rl * C);
  const Tensor en(dcat_.data(), Rl * C), hn(dcat_.data() + Rl * C, Rl * C);
  rmsnorm_forward(en, view(d.rstd_e), emb, m.mtpenw, Rl, C, eps);
  rmsnorm_forward(hn, view(d.rstd_h), h_prev, m.mtphnw, Rl, C, eps);
  join_halves(view(d.cat), en, hn, Rl, C);
  linear_forward(a.input, Tensor(), Tensor(d.cat.data(), Rl * 2 * C), m.mtpehw, Tensor(), Rl, 2 * C,
                 C);
  block_forward(a, params, 0, tp);
  head_forward(a, head_of(params, m), d.targets, tp);
}

void MtpModules::forward(const Activations& trunk, const ParameterTensors& params,
                         const Tokens& inputs, const Tokens& targets, MPI_Comm tp, double* mtp_sum,
                         double* aux, float* load) {
  const int T = T_;
  for (int k = 1; k <= D_; ++k) {
    Depth& d = depths_[size_t(k - 1)];
    Activations& a = *d.acts;
    if (runs_.empty()) {
      shift_tokens(d.tokens, inputs, B_, T, k);
      shift_tokens(d.targets, targets, B_, T, k);
    } else {
      shift_across_chunks(d, targets, k);
    }
    a.doc_start = trunk.doc_start;
    a.moe_aux = aux;
    a.moe_load = nullptr;    // counted below, without the rows past the end
    a.forward_dloss = 0.0f;  // the losses only: the backward zeroes the rows past the end
    const Tensor h_prev = k == 1 ? trunk.output() : depths_[size_t(k - 2)].acts->output();
    enter(params, first_ + k - 1, BlockGate::Use::kForward);
    forward_depth(k, h_prev, params, tp);
    const int l = first_ + k - 1;
    const GPTConfig& cfg = shard_.cfg;
    if (load && aux && shard_.rank == 0 && cfg.block_config(shard_.layers[size_t(l)]).moe()) {
      add_valid_load(load + int64_t(l) * cfg.experts, a.layer(0), int64_t(B_) * T, at_, total_, k,
                     cfg.experts, cfg.experts_per_token);
    }
    if (!mtp_sum) continue;
    // λ/D · T/(T−k) · Σ over the valid rows (T the whole sequence's): over the batch's B·T,
    // λ/D · the mean over B·(T−k).
    const int total = total_;
    const double scale = double(weight_) / D_ * double(total) / double(total - k);
    const Tensor losses = a.losses;
    const PositionRuns at = at_;
    sum_into(
        "mpf::mtp_loss", int64_t(losses.extent(0)),
        KOKKOS_LAMBDA(int64_t i) {
          return has_target(at, i, total, k) ? scale * double(losses(i)) : 0.0;
        },
        mtp_sum);
  }
  held_ = &trunk;
}

void MtpModules::backward(Activations& trunk, const ParameterTensors& params,
                          ParameterTensors& grads, BackwardBuffers& buf, const Tokens& inputs,
                          const Tokens& targets, float dloss, MPI_Comm tp, bool final) {
  // One microbatch's F right before its B (one in flight, as a step of one microbatch runs):
  // its sets are as the forward left them, and computing them again cost a tenth of a step of a
  // tiny deepseek_v3 (the shared head's product over the vocabulary and a block). Every rank of a
  // TP, CP or EP group runs the same microbatches in the same order: the same choice.
  if (held_ != &trunk || params.gate) {
    forward(trunk, params, inputs, targets, tp, nullptr, nullptr, nullptr);
  } else {
    for (Depth& d : depths_) d.acts->moe_aux = nullptr;  // as the forward again leaves it
  }
  held_ = nullptr;
  const int C = shard_.cfg.channels;
  const int64_t R = int64_t(B_) * T_;
  const Tensor dnext = view(dnext_);
  for (int k = D_; k >= 1; --k) {
    Depth& d = depths_[size_t(k - 1)];
    Activations& a = *d.acts;
    const int l = first_ + k - 1;
    const LayerParameters& m = params.blocks[size_t(l)];  // views the gate may re-point
    const LayerParameters& g = grads.blocks[size_t(l)];
    WeightGradInputs& w = *w_;
    enter(params, l, BlockGate::Use::kBackward);
    // Depth k's share of the objective: λ/D · its mean over B·(T−k) rows, so each valid row's loss
    // weighs dloss · T/(T−k) · λ/D (dloss: 1 over the batch's B·T).
    const float dk = float(double(dloss) * weight_ / D_ * double(total_) / double(total_ - k));
    const auto gradient = [&](auto logits) {
      cross_entropy_gradient(logits, a.row_stats, d.targets, dk, R, shard_.cfg.vocab,
                             shard_.vocab_begin, shard_.vocab_shard);
      zero_rows_past_end(logits, at_, total_, k, shard_.vocab_shard);
    };
    if (a.logits_bf16.extent(0) > 0) {
      gradient(a.logits_bf16);
    } else {
      gradient(a.logits);
    }
    a.logits_dloss = dk;
    a.dloss = dloss;  // the block's balance loss weighs as every block's
    const BlockWeightInputs wb = w.block(0);
    // The block output's gradient, this rank's rows: in its W slot, or apart under SP (the
    // block's B gathers it into the slot).
    const int64_t Rl = a.seq.local_rows;
    const Tensor dout = a.seq.on ? Tensor(dout_.data(), Rl * C) : Tensor(wb.dout.data(), R * C);
    head_backward_input(buf, w, a, head_of(params, m), d.targets, dk, tp, dout);
    if (k < D_) add_into(dout, dnext.data(), Rl * C);  // from depth k+1's hnorm
    const Tensor dh(dh_.data(), Rl * C);
    block_backward_input(buf, wb, dh, dout, a, params, 0, tp);
    // The module's W (shared_head.norm's, the block's, eh_proj's and the norms'), its gradients
    // final for the step, or (ZeRO-2/3) leaving after each microbatch's.
    enter(params, l, BlockGate::Use::kWeight);
    const bool final_w = final || (params.gate && params.gate->grads_per_microbatch());
    ParameterTensors hg = head_of(grads, g);
    head_backward_weight(hg, w, a, tp, final_w);
    block_backward_weight(grads, wb, a, params, 0, tp, final_w);
    // eh_proj, then the two norms: the embedding's gradient to wte, h's to depth k−1 (the trunk).
    const Tensor dcat(dcat_.data(), Rl * 2 * C), cat(d.cat.data(), Rl * 2 * C);
    linear_backward_input(dcat, dh, m.mtpehw, Rl, 2 * C, C);
    linear_backward_weight(g.mtpehw, Tensor(), dh, cat, Rl, 2 * C, C);
    const Tensor den(dh_.data(), Rl * C), dhn(dprev_.data(), Rl * C), emb(d.emb.data(), Rl * C);
    split_halves(den, dhn, dcat, Rl, C);
    const Tensor h_prev = k == 1 ? trunk.output() : depths_[size_t(k - 2)].acts->output();
    rmsnorm_backward_weight(g.mtphnw, dhn, h_prev, view(d.rstd_h), Rl, C);
    rmsnorm_backward_input(dnext, Tensor(), dhn, h_prev, view(d.rstd_h), m.mtphnw, Rl, C);
    rmsnorm_backward_weight(g.mtpenw, den, emb, view(d.rstd_e), Rl, C);
    // Under SP each TP rank's rows gave a part of the replicated rows' gradients: summed once.
    if (final_w && a.seq.on) {
      for (const Tensor* t : {&g.mtpehw, &g.mtpenw, &g.mtphnw}) {
        allreduce_sum(t->data(), int64_t(t->extent(0)), tp);
      }
    }
    // The embedding's gradient of every row (gathered under SP) into this rank's vocabulary rows.
    const Tensor demb_local = a.seq.on ? Tensor(dout_.data(), Rl * C) : view(demb_);
    rmsnorm_backward_input(demb_local, Tensor(), den, emb, view(d.rstd_e), m.mtpenw, Rl, C);
    tp::leave_backward(demb_local.data(), demb_.data(), C, a.seq, tp);
    encoder_backward_weight(grads.wte, Tensor(), view(demb_), d.tokens, B_, T_, C,
                            shard_.vocab_begin, shard_.vocab_shard, a.positions);
    if (params.gate) params.gate->weight_done(l);
  }
  trunk.extra_output_grad = Tensor(dnext_.data(), trunk.seq.local_rows * C);
}

}  // namespace mpf
