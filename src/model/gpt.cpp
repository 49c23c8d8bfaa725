#include "model/gpt.hpp"

#include <algorithm>
#include <optional>

#include "core/error.hpp"
#include "core/parallel.hpp"
#include "model/block_gate.hpp"
#include "model/block_parts.hpp"
#include "model/layers/attention.hpp"
#include "model/layers/attention_path.hpp"
#include "model/layers/cross_entropy.hpp"
#include "model/layers/encoder.hpp"
#include "model/layers/gelu.hpp"
#include "model/layers/head_norm.hpp"
#include "model/layers/layernorm.hpp"
#include "model/layers/linear.hpp"
#include "model/layers/matmul.hpp"
#include "model/layers/projection_norm.hpp"
#include "model/layers/ring_attention.hpp"
#include "model/layers/rmsnorm.hpp"
#include "model/layers/rope.hpp"
#include "model/layers/swiglu.hpp"
#include "model/mla_block.hpp"
#include "model/moe_block.hpp"
#include "parallel/device_mpi.hpp"
#include "parallel/tp_regions.hpp"

namespace mpf {

namespace {

// The per-head q/k norms over a block's R packed [Q | K | V] rows.
HeadNormShape head_norm_shape(const TpShard& s, int64_t R) {
  return {R, s.qkv, s.heads, s.kv_heads, s.head_size};
}
// The q/k norms over the whole projections: this rank's heads of them.
ProjectionNormShape projection_norm_shape(const TpShard& s, int64_t R) {
  const GPTConfig& cfg = s.cfg;
  return {R,
          s.qkv,
          s.attn,
          s.kv,
          cfg.attention_width(),
          int64_t(cfg.kv_head_count()) * s.head_size,
          int64_t(s.rank) * s.attn,
          int64_t(s.kv_begin) * s.head_size,
          s.kv_replicas};
}

// Rows [first, first + rows) of the head's R rows and where their logits live: the whole logits
// tensor, or (chunk.logit_rows) one piece's worth of it at a time.
// The logits are fp32, or bf16 under chunk.bf16 (logits16).
struct LogitPiece {
  int64_t first = 0, rows = 0;
  bool bf16 = false;
  Tensor logits;
  Tensor16 logits16;
  Tensor row_stats;
  Tokens targets(const Tokens& all) const {
    return Kokkos::subview(all, std::make_pair(first, first + rows));
  }
  // f(the piece's logits), as a Tensor or a Tensor16.
  template <class F>
  void with_logits(const F& f) const {
    if (bf16) {
      f(logits16);
    } else {
      f(logits);
    }
  }
};
template <class F>
void for_logit_pieces(const Activations& acts, const F& f) {
  const int64_t R = acts.seq.rows, Vl = acts.shard.vocab_shard;
  const int64_t piece = acts.chunk.logit_rows > 0 ? std::min<int64_t>(acts.chunk.logit_rows, R) : R;
  const bool bf16 = acts.logits_bf16.extent(0) > 0;
  for (int64_t first = 0; first < R; first += piece) {
    const int64_t n = std::min(piece, R - first);
    f(LogitPiece{first, n, bf16, Tensor(bf16 ? nullptr : acts.logits.data(), bf16 ? 0 : n * Vl),
                 Tensor16(bf16 ? acts.logits_bf16.data() : nullptr, bf16 ? n * Vl : 0),
                 Tensor(acts.row_stats.data(), 3 * n)});
  }
}
// The head's products in the logits' precision: logits (N,Vl) = lnf (N,C) · Wᵀ, written in bf16
// when they are kept so; the backward's two read the dlogits as they are.
void head_product(Tensor logits, Tensor lnf, const Tensor& w, int64_t N, int C, int Vl) {
  linear_forward(logits, Tensor(), lnf, w, Tensor(), N, C, Vl);
}
void head_product(Tensor16 logits, Tensor lnf, const Tensor& w, int64_t N, int C, int Vl) {
  linear_forward(logits, lnf, w, N, C, Vl);
}
void head_weight_grad(Tensor& dw, Tensor dlogits, Tensor lnf, int64_t N, int C, int Vl) {
  linear_backward_weight(dw, Tensor(), dlogits, lnf, N, C, Vl);
}
void head_weight_grad(Tensor& dw, Tensor16 dlogits, Tensor lnf, int64_t N, int C, int Vl) {
  linear_backward_weight(dw, dlogits, lnf, N, C, Vl);
}
// The whole head's logits (all R rows: chunk.logit_rows == 0) as one piece.
LogitPiece whole_logits(const Activations& acts) {
  const bool bf16 = acts.logits_bf16.extent(0) > 0;
  return LogitPiece{0, acts.seq.rows, bf16, acts.logits, acts.logits_bf16, acts.row_stats};
}

// The backward of model_norm_forward (gpt.hpp): the family's normalisation.
void model_norm_backward_input(Tensor dinp, Tensor dresidual, Tensor dout, Tensor inp, Tensor mean,
                               Tensor rstd, Tensor weight, int64_t N, const GPTConfig& cfg) {
  if (cfg.rms_norm()) {
    rmsnorm_backward_input(dinp, dresidual, dout, inp, rstd, weight, N, cfg.channels);
  } else {
    layernorm_backward_input(dinp, dresidual, dout, inp, mean, rstd, weight, N, cfg.channels);
  }
}

void model_norm_backward_weight(Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor mean,
                                Tensor rstd, int64_t N, const GPTConfig& cfg) {
  if (cfg.rms_norm()) {
    rmsnorm_backward_weight(dweight, dout, inp, rstd, N, cfg.channels);
  } else {
    layernorm_backward_weight(dweight, dbias, dout, inp, mean, rstd, N, cfg.channels);
  }
}

// Under SP, LayerNorm weight gradients come from this rank's rows: sum them over TP.
void sum_over_tp(const Tensor& grad, const tp::SequenceSplit& seq, MPI_Comm tp) {
  if (!seq.on || grad.extent(0) == 0) return;
  allreduce_sum(grad.data(), int64_t(grad.extent(0)), tp);
}
// What a block's pieces need: its parameters and activations, and the shapes.
struct BlockContext {
  // The block's shard: a mixed model's dense block has its own (TpShard::block_shard).
  const TpShard s;
  const tp::SequenceSplit& seq;
  int C;
  int64_t R, Rl;             // all rows, this rank's rows outside the TP region
  const LayerParameters& p;  // views into the slab, not copies
  LayerActivations a;
  BlockContext(const Activations& acts, const ParameterTensors& params, int l)
      : s(acts.shard.block_shard(acts.shard.layers[size_t(acts.chunk.first_layer + l)])),
        seq(acts.seq),
        C(acts.cfg.channels),
        R(acts.seq.rows),
        Rl(acts.seq.local_rows),
        p(params.blocks[size_t(acts.chunk.first_layer + l)]),
        a(acts.layer(l)) {}
};

// A sublayer's input from this rank's rows of the residual stream into `out` (all rows' buffer):
// their norm (pre-norm blocks) or themselves (post-norm), then entering the TP region (f, or
// all-gather under SP).
void norm_and_enter(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight, Tensor bias,
                    const tp::SequenceSplit& seq, const GPTConfig& cfg, MPI_Comm tp) {
  const int C = cfg.channels;
  const Tensor mine = rows(out, seq.row_begin, seq.local_rows, C);
  if (cfg.post_norm()) {
    copy_into(mine, inp.data(), seq.local_rows * C);
  } else {
    model_norm_forward(mine, mean, rstd, inp, weight, bias, seq.local_rows, cfg);
  }
  tp::enter_forward(out.data(), C, seq, tp);
}

// An activation products read, kept in fp32 or (LayerActivations' *_bf16) in bf16: f is called
// with the one the set keeps.
template <class F>
void with_kept(const Tensor& f32, const Tensor16& b16, const F& f) {
  if (b16.extent(0) > 0) {
    f(b16);
  } else {
    f(f32);
  }
}

// A sublayer's input formed in fp32 (`staged`, the set's staging under chunk.bf16) kept rounded
// in `kept` where the set keeps it in bf16; else nothing to do.
void keep_rounded(const Tensor16& kept, const Tensor& staged) {
  if (kept.extent(0) > 0) round_to_bf16(kept.data(), staged.data(), int64_t(kept.extent(0)));
}

// The same, the staged values themselves rounded too: Q, K and V, which every attention path then
// reads as they are (in bf16 each rounds its operands anyway: the same bits), forward and
// backward alike.
void keep_rounded_in_place(const Tensor16& kept, const Tensor& staged) {
  if (kept.extent(0) > 0) {
    round_in_place_keeping(kept.data(), staged.data(), int64_t(kept.extent(0)));
  }
}

// A kept bf16 tensor widened back into its fp32 staging, for kernels that read fp32 (the
// attention's backward reads Q, K, V and its output).
void widen_kept(const Tensor& staged, const Tensor16& kept) {
  if (kept.extent(0) > 0) widen_from_bf16(staged.data(), kept.data(), int64_t(kept.extent(0)));
}

// GELU's or SwiGLU's output h (R, F) from the fc product's output fch (R, Fin), both in bf16 or
// both in fp32 (the kernels the forward runs: the same bits).
template <class H>
void mlp_activation(H h, H fch, int64_t R, const TpShard& s) {
  if (s.cfg.swiglu()) {
    swiglu_forward(h, fch, R, s.fc);
  } else {
    gelu_forward(h, fch, R * s.fc);
  }
}

// The dense MLP's fc product with its output kept in bf16 (a.fch_bf16): formed in fp32 in the
// staging, as many rows at a time as it holds, and rounded once; then GELU or SwiGLU from it
// into a.fch_gelu_bf16, as autocast computes them from its bf16 linear output.
void fc_forward_kept(const LayerActivations& a, const LayerParameters& p, const TpShard& s,
                     int64_t R) {
  const int C = s.cfg.channels;
  const int64_t width = s.mlp_in;
  const int64_t piece =
      std::max<int64_t>(1, std::min<int64_t>(R, int64_t(a.staging.extent(0)) / width));
  for (int64_t first = 0; first < R; first += piece) {
    const int64_t n = std::min(piece, R - first);
    const Tensor out(a.staging.data(), n * width);
    // A mixed stack's dense block reads ln2 in fp32: its set keeps it so for the experts' router.
    with_kept(a.ln2, a.ln2_bf16, [&](auto in) {
      using In = decltype(in);
      linear_forward(out, Tensor(), In(in.data() + first * C, n * C), p.fcw, p.fcb, n, C,
                     int(width));
    });
    round_to_bf16(a.fch_bf16.data() + first * width, out.data(), n * width);
  }
  mlp_activation(a.fch_gelu_bf16, a.fch_bf16, R, s);
}

// A row-parallel linear layer leaving the TP region: out (Rl,C) = residual + bias + the sum over
// ranks of inp (R,width) · weightᵀ (g, or reduce-scatter under SP). `partial` (R,C) is where the
// sum is formed: out itself without SP. In: Tensor, or Tensor16 for an input kept in bf16.
// Under bf16 TP payloads the residual and the bias join after the sum (seed_rows, join_rows).
template <class In>
void row_parallel_and_leave(Tensor out, Tensor partial, Tensor residual, In inp, Tensor weight,
                            Tensor bias, int width, const tp::SequenceSplit& seq, int rank, int C,
                            MPI_Comm tp) {
  const Tensor sum = seq.on ? partial : out;
  seed_rows(sum, residual, bias, seq, rank, C);
  linear_forward_accumulate(sum, inp, weight, seq.rows, width, C);
  tp::leave_forward(sum.data(), out.data(), C, seq, tp);
  join_rows(out, residual, bias, seq, C);
}

// A sublayer's row-parallel projection joining the residual stream: out = residual + its output
// (pre-norm), or residual + norm(its output) with the output kept in `sub` (post-norm).
struct SublayerNorm {
  Tensor sub, mean, rstd, weight, bias;
};
template <class In>
void project_and_join(Tensor out, const SublayerNorm& n, Tensor partial, Tensor residual, In inp,
                      Tensor weight, Tensor bias, int width, const tp::SequenceSplit& seq,
                      const TpShard& s, MPI_Comm tp) {
  const GPTConfig& cfg = s.cfg;
  const int C = cfg.channels;
  if (!cfg.post_norm()) {
    row_parallel_and_leave(out, partial, residual, inp, weight, bias, width, seq, s.rank, C, tp);
    return;
  }
  row_parallel_and_leave(n.sub, partial, Tensor(), inp, weight, bias, width, seq, s.rank, C, tp);
  model_norm_forward(out, n.mean, n.rstd, n.sub, n.weight, n.bias, seq.local_rows, cfg);
  add_into(out, residual.data(), seq.local_rows * C);
}

// The q/k norms of the projection's output, before the rotation.
void qk_norm_forward(const LayerActivations& a, const LayerParameters& p, const TpShard& s,
                     int64_t R, MPI_Comm tp) {
  switch (s.cfg.qk_norm_kind()) {
    case QkNorm::kNone:
      break;
    case QkNorm::kPerHead:
      head_rmsnorm_forward(a.qkv, a.qk_raw, a.qk_rstd, p.q_normw, p.k_normw, head_norm_shape(s, R),
                           s.cfg.norm_eps);
      break;
    case QkNorm::kWhole:
      projection_rmsnorm_forward(a.qkv, a.qk_raw, a.qk_rstd, p.q_normw, p.k_normw,
                                 projection_norm_shape(s, R), s.cfg.norm_eps, tp);
      break;
  }
}

// Their backward: the weights' gradients into dnormw while dqkv is still the normalised values'
// gradient, then (in place) the raw values' gradient, what the projection's gradients read.
void qk_norm_backward(Tensor dqkv, Tensor dnormw, Tensor sums, const LayerActivations& a,
                      const LayerParameters& p, const TpShard& s, int64_t R, MPI_Comm tp) {
  switch (s.cfg.qk_norm_kind()) {
    case QkNorm::kNone:
      break;
    case QkNorm::kPerHead:
      head_rmsnorm_backward_weight(dnormw, dqkv, a.qk_raw, a.qk_rstd, head_norm_shape(s, R));
      head_rmsnorm_backward_input(dqkv, a.qk_raw, a.qk_rstd, p.q_normw, p.k_normw,
                                  head_norm_shape(s, R));
      break;
    case QkNorm::kWhole: {
      const ProjectionNormShape shape = projection_norm_shape(s, R);
      projection_rmsnorm_backward_weight(dnormw, dqkv, a.qk_raw, a.qk_rstd, shape);
      projection_rmsnorm_backward_input(dqkv, sums, a.qk_raw, a.qk_rstd, p.q_normw, p.k_normw,
                                        shape, tp);
      break;
    }
  }
}

// W's share of the q/k norms: B's gradient of this rank's part added into the weights' gradients
// (the shared per-head weights, or this rank's heads' slices of the whole-projection weights).
void add_qk_norm_grads(const LayerParameters& g, Tensor dnormw, const TpShard& s) {
  if (dnormw.extent(0) == 0) return;
  const bool per_head = s.cfg.qk_norm_kind() == QkNorm::kPerHead;
  const int64_t q_first = per_head ? 0 : int64_t(s.rank) * s.attn;
  const int64_t k_first = per_head ? 0 : int64_t(s.kv_begin) * s.head_size;
  const int64_t q = per_head ? s.head_size : s.attn, k = per_head ? s.head_size : s.kv;
  add_into(Tensor(g.q_normw.data() + q_first, q), dnormw.data(), q);
  add_into(Tensor(g.k_normw.data() + k_first, k), dnormw.data() + q, k);
}
}  // namespace

void model_norm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight,
                        Tensor bias, int64_t N, const GPTConfig& cfg) {
  if (cfg.rms_norm()) {
    rmsnorm_forward(out, rstd, inp, weight, N, cfg.channels, cfg.norm_eps);
  } else {
    layernorm_forward(out, mean, rstd, inp, weight, bias, N, cfg.channels);
  }
}

const Tensor& head_weight(const ParameterTensors& t, const GPTConfig& cfg) {
  return cfg.tied ? t.wte : t.lmhead;
}
Tensor& head_weight(ParameterTensors& t, const GPTConfig& cfg) {
  return cfg.tied ? t.wte : t.lmhead;
}

void embedding_forward(Activations& acts, const ParameterTensors& params, const Tokens& inputs,
                       MPI_Comm tp) {
  const TpShard& s = acts.shard;
  const int C = acts.cfg.channels;
  // Each rank's vocabulary shard gives a partial embedding of every row; leaving the region sums
  // them (g), into this rank's rows under SP.
  const Tensor partial = acts.seq.on ? acts.partial : acts.input;
  encoder_forward(partial, inputs, params.wte, params.wpe, acts.B, acts.T, C, s.vocab_begin,
                  s.vocab_shard, /*add_positions=*/s.rank == 0 && !acts.cfg.rope(), acts.positions);
  tp::leave_forward(partial.data(), acts.input.data(), C, acts.seq, tp);
}

void block_forward(Activations& acts, const ParameterTensors& params, int l, MPI_Comm tp) {
  const BlockContext b(acts, params, l);
  const RopePositions rope{acts.rope_cos, acts.rope_sin, acts.T, 0};
  block_forward(b.a, acts.block_input(l), acts.partial, b.p, b.s, b.seq, tp, rope,
                [&](Tensor atty, Tensor qkv) {
                  // --qk-clip: each row's largest logit, kept per head by max (optim/qk_clip.hpp).
                  const Tensor rows = acts.qk_max ? acts.qk_rows : Tensor();
                  // GPT-2's multi-head attention is the kv_heads == heads case.
                  if (acts.ring) {
                    acts.ring->forward(atty, b.a.lse, qkv, acts.doc_start, rows);
                  } else {
                    attention_forward(
                        acts.attention, atty, b.a.lse,
                        packed_attention(qkv, acts.B, b.s.heads, b.s.kv_heads, b.s.head_size,
                                         acts.positions, acts.doc_start, b.s.cfg.sliding_window),
                        false, rows);
                  }
                  if (acts.qk_max) {
                    fold_head_max(acts.qk_max + int64_t(acts.chunk.first_layer + l) * b.s.heads,
                                  rows, acts.B, b.s.heads, acts.T);
                  }
                });
}

void block_forward(const LayerActivations& a, Tensor x, Tensor partial, const LayerParameters& p,
                   const TpShard& s, const tp::SequenceSplit& seq, MPI_Comm tp,
                   const RopePositions& rope, const AttentionCore& attend) {
  const GPTConfig& cfg = s.cfg;
  const int C = cfg.channels;
  const int64_t R = seq.rows;
  const Tensor none;
  // Attention: norm (pre-norm blocks), enter (f), column-parallel QKV (this rank's heads; the
  // q/k norms, Llama's rotation of Q and K), attention, row-parallel projection with the
  // residual (after its norm in post-norm blocks), leave (g). Llama's tensors have no biases:
  // their views are empty.
  norm_and_enter(a.ln1, a.ln1_mean, a.ln1_rstd, x, p.ln1w, p.ln1b, seq, cfg, tp);
  keep_rounded(a.ln1_bf16, a.ln1);
  if (cfg.mla()) {  // latent attention forms the packed [Q | K | V] (model/mla_block.hpp)
    mla_forward(a, p, s, R, rope.cos, rope.sin, rope.T, rope.pos0);
    keep_rounded_in_place(a.qkv_bf16, a.qkv);
    attend(a.atty, a.qkv);
    keep_rounded(a.atty_bf16, a.atty);
    project_and_join(a.residual2, {a.attn_out, a.ln1_mean, a.ln1_rstd, p.ln1w, p.ln1b}, partial, x,
                     mla_attention_output(a, s, R), p.attprojw, p.attprojb,
                     s.heads * cfg.v_head_dim, seq, s, tp);
  } else {
    with_kept(a.ln1, a.ln1_bf16,
              [&](auto in) { linear_forward(a.qkv, none, in, p.qkvw, p.qkvb, R, C, s.qkv); });
    qk_norm_forward(a, p, s, R, tp);
    if (cfg.rope()) {
      rope_forward(a.qkv, rope.cos, rope.sin, R, rope.T, rope.pos0, s.heads, s.kv_heads,
                   s.head_size);
    }
    keep_rounded_in_place(a.qkv_bf16, a.qkv);
    attend(a.atty, a.qkv);
    keep_rounded(a.atty_bf16, a.atty);
    with_kept(a.atty, a.atty_bf16, [&](auto o) {
      project_and_join(a.residual2, {a.attn_out, a.ln1_mean, a.ln1_rstd, p.ln1w, p.ln1b}, partial,
                       x, o, p.attprojw, p.attprojb, s.attn, seq, s, tp);
    });
  }
  // MLP: the same pattern with column-parallel fc, GELU (or SwiGLU) and row-parallel proj.
  norm_and_enter(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, p.ln2w, p.ln2b, seq, cfg, tp);
  if (cfg.moe()) {  // a mixture of experts in place of the one MLP (pre-norm families only)
    moe_mlp_forward(a, a.residual3, partial, a.residual2, p, s, seq, tp);
    return;
  }
  keep_rounded(a.ln2_bf16, a.ln2);
  // ln2 and fch_gelu are kept in bf16 together (bf16_kept).
  const auto mlp = [&](auto in, auto h) {
    if (cfg.swiglu()) {
      linear_forward(a.fch, none, in, p.fcw, p.fcb, R, C, s.mlp_in);
      swiglu_forward(h, a.fch, R, s.fc);
    } else {
      linear_gelu_forward(a.fch, h, in, p.fcw, p.fcb, R, C, s.fc);
    }
    project_and_join(a.residual3, {a.mlp_out, a.ln2_mean, a.ln2_rstd, p.ln2w, p.ln2b}, partial,
                     a.residual2, h, p.fcprojw, p.fcprojb, s.fc, seq, s, tp);
  };
  if (a.fch_bf16.extent(0) > 0) {  // fch kept in bf16 (bf16_kept), with ln2 and fch_gelu
    fc_forward_kept(a, p, s, R);
    project_and_join(a.residual3, {a.mlp_out, a.ln2_mean, a.ln2_rstd, p.ln2w, p.ln2b}, partial,
                     a.residual2, a.fch_gelu_bf16, p.fcprojw, p.fcprojb, s.fc, seq, s, tp);
  } else if (a.ln2_bf16.extent(0) > 0) {
    mlp(a.ln2_bf16, a.fch_gelu_bf16);
  } else {
    mlp(a.ln2, a.fch_gelu);
  }
}

void head_forward(Activations& acts, const ParameterTensors& params, const Tokens& targets,
                  MPI_Comm tp) {
  const TpShard& s = acts.shard;
  const tp::SequenceSplit& seq = acts.seq;
  const GPTConfig& cfg = acts.cfg;
  const int C = cfg.channels;
  const Tensor none;
  model_norm_forward(rows(acts.lnf, seq.row_begin, seq.local_rows, C), acts.lnf_mean, acts.lnf_rstd,
                     acts.output(), params.lnfw, params.lnfb, seq.local_rows, cfg);
  tp::enter_forward(acts.lnf.data(), C, seq, tp);
  // The logits of this rank's vocabulary shard, for every row (in pieces: the losses only). With
  // the step's dloss known and the logits kept whole, the classifier leaves their gradient in them.
  const float dloss = acts.chunk.logit_rows > 0 ? 0.0f : acts.forward_dloss;
  for_logit_pieces(acts, [&](const LogitPiece& p) {
    p.with_logits([&](auto z) {
      head_product(z, rows(acts.lnf, p.first, p.rows, C), head_weight(params, cfg), p.rows, C,
                   s.vocab_shard);
      cross_entropy_forward(rows(acts.losses, p.first, p.rows, 1), z, p.row_stats,
                            p.targets(targets), p.rows, cfg.vocab, s.vocab_begin, s.vocab_shard, tp,
                            dloss);
    });
  });
  acts.logits_dloss = dloss;
}

void head_backward_in_pieces(ParameterTensors& grads, BackwardBuffers& buf, WeightGradInputs& w,
                             Activations& acts, const ParameterTensors& params,
                             const Tokens& targets, float dloss, MPI_Comm tp, Tensor dout,
                             bool final_microbatch) {
  const TpShard& s = acts.shard;
  const tp::SequenceSplit& seq = acts.seq;
  const GPTConfig& cfg = acts.cfg;
  const int C = cfg.channels;
  const Tensor none;
  const Tensor partial = seq.on ? buf.partial : w.dlnf;
  // Each piece's logits again (the forward kept only the losses), their gradient, its part of the
  // input gradient and of the head's weight gradient (its W, here with its B: the piece's dlogits
  // are gone once the next piece is computed).
  for_logit_pieces(acts, [&](const LogitPiece& p) {
    const Tensor lnf = rows(acts.lnf, p.first, p.rows, C);
    p.with_logits([&](auto z) {
      head_product(z, lnf, head_weight(params, cfg), p.rows, C, s.vocab_shard);
      cross_entropy_forward(rows(acts.losses, p.first, p.rows, 1), z, p.row_stats,
                            p.targets(targets), p.rows, cfg.vocab, s.vocab_begin, s.vocab_shard, tp,
                            dloss);
      linear_backward_input(rows(partial, p.first, p.rows, C), z, head_weight(params, cfg), p.rows,
                            C, s.vocab_shard);
      head_weight_grad(head_weight(grads, cfg), z, lnf, p.rows, C, s.vocab_shard);
    });
  });
  tp::enter_backward(partial.data(), w.dlnf.data(), C, seq, tp);
  model_norm_backward_input(dout, none, w.dlnf, acts.output(), acts.lnf_mean, acts.lnf_rstd,
                            params.lnfw, seq.local_rows, cfg);
  model_norm_backward_weight(grads.lnfw, grads.lnfb, w.dlnf, acts.output(), acts.lnf_mean,
                             acts.lnf_rstd, seq.local_rows, cfg);
  if (final_microbatch) {
    sum_over_tp(grads.lnfw, seq, tp);
    sum_over_tp(grads.lnfb, seq, tp);
  }
}

void head_backward_input(BackwardBuffers& buf, WeightGradInputs& w, Activations& acts,
                         const ParameterTensors& params, const Tokens& targets, float dloss,
                         MPI_Comm tp, Tensor dout) {
  const TpShard& s = acts.shard;
  const tp::SequenceSplit& seq = acts.seq;
  const GPTConfig& cfg = acts.cfg;
  const int C = cfg.channels;
  const Tensor none;
  const Tensor partial = seq.on ? buf.partial : w.dlnf;
  whole_logits(acts).with_logits([&](auto z) {
    // The forward wrote dlogits when it knew dloss; else they are made from its row statistics.
    if (acts.logits_dloss != dloss) {
      if (acts.logits_dloss != 0.0f)
        MPF_FATAL("the head's forward wrote dlogits for another dloss");
      cross_entropy_gradient(z, acts.row_stats, targets, dloss, seq.rows, cfg.vocab, s.vocab_begin,
                             s.vocab_shard);
      acts.logits_dloss = dloss;
    }
    linear_backward_input(partial, z, head_weight(params, cfg), seq.rows, C, s.vocab_shard);
  });
  tp::enter_backward(partial.data(), w.dlnf.data(), C, seq, tp);
  model_norm_backward_input(dout, none, w.dlnf, acts.output(), acts.lnf_mean, acts.lnf_rstd,
                            params.lnfw, seq.local_rows, cfg);
}

void head_backward_weight(ParameterTensors& grads, const WeightGradInputs& w,
                          const Activations& acts, MPI_Comm tp, bool final_microbatch) {
  const GPTConfig& cfg = acts.cfg;
  const tp::SequenceSplit& seq = acts.seq;
  const Tensor none;
  whole_logits(acts).with_logits([&](auto z) {
    head_weight_grad(head_weight(grads, cfg), z, acts.lnf, seq.rows, cfg.channels,
                     acts.shard.vocab_shard);
  });
  model_norm_backward_weight(grads.lnfw, grads.lnfb, w.dlnf, acts.output(), acts.lnf_mean,
                             acts.lnf_rstd, seq.local_rows, cfg);
  if (final_microbatch) {
    sum_over_tp(grads.lnfw, seq, tp);
    sum_over_tp(grads.lnfb, seq, tp);
  }
}

namespace {
// The dense MLP's backward, from dout (this rank's rows of the block output's gradient) to its
// input's partial gradient (R,C) in `dmlp_in`; a post-norm block's MLP norm first, keeping dout
// in w.dln2 for its W.
void dense_mlp_backward_input(BackwardBuffers& buf, const BlockWeightInputs& w, Tensor dmlp_in,
                              Tensor dout, const LayerActivations& a, const LayerParameters& p,
                              const TpShard& s, const tp::SequenceSplit& seq, MPI_Comm tp) {
  const GPTConfig& cfg = s.cfg;
  const int C = cfg.channels;
  const int64_t R = seq.rows, Rl = seq.local_rows;
  if (cfg.post_norm()) {
    // dout, the norm's output gradient, kept for W in dln2; the MLP output's gradient in w.dout,
    // gathered (under SP through the scratch dresidual2, free until the attention's).
    copy_into(w.dln2, dout.data(), Rl * C);
    const Tensor dsub = seq.on ? buf.dresidual2 : w.dout;
    model_norm_backward_input(dsub, Tensor(), w.dln2, a.mlp_out, a.ln2_mean, a.ln2_rstd, p.ln2w, Rl,
                              cfg);
    tp::leave_backward(dsub.data(), w.dout.data(), C, seq, tp);
  } else {
    tp::leave_backward(dout.data(), w.dout.data(), C, seq, tp);
  }
  if (cfg.swiglu()) {
    linear_backward_input(buf.dmlp, w.dout, p.fcprojw, R, s.fc, C);
    with_kept(a.fch, a.fch_bf16,
              [&](auto fch) { swiglu_backward_input(w.dfch, buf.dmlp, fch, R, s.fc); });
  } else {
    linear_backward_input(w.dfch, w.dout, p.fcprojw, R, s.fc, C);
    with_kept(a.fch, a.fch_bf16,
              [&](auto fch) { gelu_backward_input(w.dfch, w.dfch, fch, R * s.fc); });
  }
  linear_backward_input(dmlp_in, w.dfch, p.fcw, R, C, s.mlp_in);
}
}  // namespace

int64_t held_output_gradient_elems(const TpShard& s, int64_t R) {
  if (s.cfg.moe() || s.cfg.mla()) return 0;
  return R * (2 * int64_t(s.cfg.channels) + s.mlp_in + s.qkv);
}

namespace {
// Under bf16 products, a dense block's four output gradients (dY of the MLP's down and up
// products, of the attention's projection and of Q, K and V) rounded once each for B's input
// products and W's weight products right after, instead of once by each (9C values a row).
void hold_output_gradients(std::optional<HeldOnFirstUse>& held, const BlockWeightInputs& w,
                           const Activations& acts, const ParameterTensors& params, int l) {
  const BlockContext b(acts, params, l);
  const TpShard& s = b.s;
  if (!products_in_bf16() || held_output_gradient_elems(s, b.R) == 0) return;
  const int64_t R = b.R, C = s.cfg.channels;
  held.emplace(std::initializer_list<HeldOnFirstUse::Span>{{w.dout.data(), R * C},
                                                           {w.dfch.data(), R * s.mlp_in},
                                                           {w.dres2.data(), R * C},
                                                           {w.dqkv.data(), R * s.qkv}});
}
}  // namespace

void block_backward_input(BackwardBuffers& buf, const BlockWeightInputs& w, Tensor dinp,
                          Tensor dout, const Activations& acts, const ParameterTensors& params,
                          int l, MPI_Comm tp) {
  const BlockContext b(acts, params, l);
  const auto& [s, seq, C, R, Rl, p, a] = b;
  // The forward, bottom-up. Leaving a region backwards: identity, or all-gather under SP;
  // entering one backwards: f's all-reduce, or reduce-scatter under SP. Every gradient a weight
  // gradient reads lands in `w`.
  const GPTConfig& cfg = s.cfg;
  const Tensor none;
  const int64_t local = Rl * C;
  // The MLP's input gradient: this rank's partial of every row, then summed entering the region
  // backwards. residual2's gradient, this rank's rows: through the MLP's input norm plus dout
  // (pre-norm), or the MLP's input gradient plus dout, in dln1 for the attention's norm's W
  // (post-norm).
  const Tensor dmlp_in = cfg.post_norm() ? w.dln1 : w.dln2;
  const Tensor partial2 = seq.on ? buf.partial : dmlp_in;
  Tensor dresidual = dout;
  if (cfg.moe()) {
    moe_mlp_backward_input(buf, w, partial2, dout, a, p, s, seq, tp);
    if (!seq.on) dresidual = buf.moe_dout;  // dout's slot now holds the experts' gradients
  } else {
    dense_mlp_backward_input(buf, w, partial2, dout, a, p, s, seq, tp);
  }
  tp::enter_backward(partial2.data(), dmlp_in.data(), C, seq, tp);
  Tensor dres2 = seq.on ? buf.dresidual2 : w.dres2;
  if (cfg.post_norm()) {
    add_into(w.dln1, w.dln2.data(), local);
    dres2 = w.dln1;
    // The attention's norm, as the MLP's: its output's gradient gathered in w.dres2.
    const Tensor dsub = seq.on ? buf.dresidual2 : w.dres2;
    model_norm_backward_input(dsub, none, w.dln1, a.attn_out, a.ln1_mean, a.ln1_rstd, p.ln1w, Rl,
                              cfg);
    tp::leave_backward(dsub.data(), w.dres2.data(), C, seq, tp);
  } else {
    model_norm_backward_input(dres2, dresidual, w.dln2, a.residual2, a.ln2_mean, a.ln2_rstd, p.ln2w,
                              Rl, cfg);
    tp::leave_backward(dres2.data(), w.dres2.data(), C, seq, tp);
  }
  if (cfg.mla()) {
    mla_attention_output_backward(buf.datty, buf.mla, w.dres2, p, s, R);
  } else {
    linear_backward_input(buf.datty, w.dres2, p.attprojw, R, s.attn, C);
  }
  // The packed [Q | K | V]'s gradient: kept for W's Q, K, V products, or (latent attention, whose
  // W reads its projections' gradients instead) B's scratch.
  const Tensor dqkv = cfg.mla() ? buf.dqkv : w.dqkv;
  // Kept in bf16: Q, K, V and the attention's output widened into the staging, where the
  // attention's backward reads them (its row terms from the rounded output, as FlashAttention's
  // bf16 backward reads its bf16 output).
  widen_kept(a.qkv, a.qkv_bf16);
  widen_kept(a.atty, a.atty_bf16);
  if (acts.ring) {
    acts.ring->backward_input(dqkv, buf.delta, buf.datty, a.qkv, a.atty, a.lse, acts.doc_start);
  } else {
    const AttentionInputs x = packed_attention(a.qkv, acts.B, s.heads, s.kv_heads, s.head_size,
                                               acts.positions, acts.doc_start, cfg.sliding_window);
    attention_backward_delta(buf.delta, a.atty, buf.datty, acts.B, acts.T, s.heads, s.head_size);
    float* dq = dqkv.data();
    attention_backward(acts.attention, dq, x.ldq, false, dq + s.attn, dq + s.attn + s.kv, x.ldq,
                       false, buf.datty, a.lse, buf.delta, x);
  }
  if (cfg.rope() && !cfg.mla()) {
    // The gradient of the rotated Q and K, rotated back: the gradient of the projection's output.
    rope_backward(dqkv, acts.rope_cos, acts.rope_sin, R, acts.T, 0, s.heads, s.kv_heads,
                  s.head_size);
  }
  qk_norm_backward(dqkv, w.dqk_normw, buf.qk_sums, a, p, s, R, tp);
  // The block input's gradient: through the attention's input norm plus residual2's (pre-norm),
  // or the attention's input gradient plus residual2's (post-norm).
  const Tensor dattn_in = cfg.post_norm() ? dinp : w.dln1;
  const Tensor partial1 = seq.on ? buf.partial : dattn_in;
  if (cfg.mla()) {
    mla_backward_input(partial1, w.dmla, buf.mla, dqkv, a, p, s, R, acts.rope_cos, acts.rope_sin,
                       acts.T);
  } else {
    linear_backward_input(partial1, dqkv, p.qkvw, R, C, s.qkv);
  }
  tp::enter_backward(partial1.data(), dattn_in.data(), C, seq, tp);
  if (cfg.post_norm()) {
    add_into(dinp, dres2.data(), local);
  } else {
    model_norm_backward_input(dinp, dres2, w.dln1, acts.block_input(l), a.ln1_mean, a.ln1_rstd,
                              p.ln1w, Rl, cfg);
  }
}

void block_backward_weight(ParameterTensors& grads, const BlockWeightInputs& w,
                           const Activations& acts, const ParameterTensors& params, int l,
                           MPI_Comm tp, bool final_microbatch) {
  const BlockContext b(acts, grads, l);
  const auto& [s, seq, C, R, Rl, g, a] = b;
  const LayerParameters& p = params.blocks[size_t(acts.chunk.first_layer + l)];
  // The row-parallel layers read all rows of their output gradients (gathered by B under SP), so
  // their biases get the whole gradient on every rank.
  // A norm's input: the sublayer's (pre-norm) or its output (post-norm).
  const bool post = s.cfg.post_norm();
  // Selective recomputation: a norm's output formed again, as the forward formed it (the same
  // kernels on the same inputs, its statistics rewritten with the same values).
  auto norm_again = [&](bool again, Tensor out, Tensor16 out16, Tensor mean, Tensor rstd,
                        Tensor inp, Tensor weight, Tensor bias) {
    if (!again) return;
    norm_and_enter(out, mean, rstd, inp, weight, bias, seq, s.cfg, tp);
    keep_rounded(out16, out);
  };
  if (s.cfg.moe()) {
    moe_mlp_backward_weight(g, w, a, s, seq);
  } else {
    // Not kept (bf16 sets keep fch; selective recomputation): GELU's or SwiGLU's output formed
    // again, as the forward did.
    if (a.recompute_h && a.fch_bf16.extent(0) > 0)
      mlp_activation(a.fch_gelu_bf16, a.fch_bf16, R, s);
    if (a.recompute_h && a.fch_bf16.extent(0) == 0) mlp_activation(a.fch_gelu, a.fch, R, s);
    with_kept(a.fch_gelu, a.fch_gelu_bf16,
              [&](auto h) { linear_backward_weight(g.fcprojw, g.fcprojb, w.dout, h, R, s.fc, C); });
    norm_again(a.recompute_ln2, a.ln2, a.ln2_bf16, a.ln2_mean, a.ln2_rstd, a.residual2, p.ln2w,
               p.ln2b);
    with_kept(a.ln2, a.ln2_bf16,
              [&](auto in) { linear_backward_weight(g.fcw, g.fcb, w.dfch, in, R, C, s.mlp_in); });
  }
  model_norm_backward_weight(g.ln2w, g.ln2b, w.dln2, post ? a.mlp_out : a.residual2, a.ln2_mean,
                             a.ln2_rstd, Rl, s.cfg);
  if (s.cfg.mla()) {  // o_proj's input: the attention's V parts, as the forward formed them
    linear_backward_weight(g.attprojw, g.attprojb, w.dres2, mla_kept_attention_output(a, s, R), R,
                           s.heads * s.cfg.v_head_dim, C);
  } else {
    with_kept(a.atty, a.atty_bf16, [&](auto o) {
      linear_backward_weight(g.attprojw, g.attprojb, w.dres2, o, R, s.attn, C);
    });
  }
  norm_again(a.recompute_ln1, a.ln1, a.ln1_bf16, a.ln1_mean, a.ln1_rstd, acts.block_input(l),
             p.ln1w, p.ln1b);
  if (s.cfg.mla()) {
    mla_backward_weight(g, w.dmla, a, s, R, tp, final_microbatch);
  } else {
    with_kept(a.ln1, a.ln1_bf16,
              [&](auto in) { linear_backward_weight(g.qkvw, g.qkvb, w.dqkv, in, R, C, s.qkv); });
  }
  add_qk_norm_grads(g, w.dqk_normw, s);
  model_norm_backward_weight(g.ln1w, g.ln1b, w.dln1, post ? a.attn_out : acts.block_input(l),
                             a.ln1_mean, a.ln1_rstd, Rl, s.cfg);
  if (final_microbatch) {
    for (const Tensor* t : {&g.ln1w, &g.ln1b, &g.ln2w, &g.ln2b}) sum_over_tp(*t, seq, tp);
    // Each TP rank normalised its own heads: the q/k norms' gradients are summed over them all
    // (a replicated kv head's from each of its ranks' query heads).
    for (const Tensor* t : {&g.q_normw, &g.k_normw}) {
      if (t->extent(0) > 0) allreduce_sum(t->data(), int64_t(t->extent(0)), tp);
    }
    // A kv head replicated on several ranks got from each only its own query heads' part of the
    // K and V gradients: the rows [Q | K | V] past Q are summed over the ranks sharing it.
    if (s.kv_replicas > 1) {
      const MPI_Comm kv = acts.groups.kv;
      allreduce_sum(g.qkvw.data() + int64_t(s.attn) * C, int64_t(2) * s.kv * C, kv);
      if (g.qkvb.extent(0) > 0) allreduce_sum(g.qkvb.data() + s.attn, int64_t(2) * s.kv, kv);
    }
  }
}

void embedding_backward_weight(ParameterTensors& grads, Tensor dembed, const Activations& acts,
                               const Tokens& inputs) {
  const TpShard& s = acts.shard;
  encoder_backward_weight(grads.wte, grads.wpe, dembed, inputs, acts.B, acts.T, acts.cfg.channels,
                          s.vocab_begin, s.vocab_shard, acts.positions);
}

namespace {
// Where block i of a chunk runs: in the chunk's own activations, or, under full recomputation, in
// a copy of the one-block workspace pointed at the block's input and output in the chunk's store
// and, given `kept`, at the activations W reads in the block's WeightGradInputs (the views are
// unmanaged, so re-pointing them copies nothing, and the workspace itself is never re-pointed).
struct BlockSite {
  Activations acts;
  int index;
};
BlockSite block_site(const Activations& store, const Activations* workspace, int i,
                     const LayerActivations* kept = nullptr, bool forward = false) {
  if (!workspace) return {store, i};
  Activations site = *workspace;
  // The forward adds its balance losses; a recomputation, the same again, does not.
  site.moe_aux = forward ? store.moe_aux : nullptr;
  site.moe_load = store.moe_load;
  site.dloss = store.dloss;
  site.doc_start = store.doc_start;  // the microbatch's, which the workspace does not know
  site.input = store.block_input(i);
  site.residual3 = store.layer(i).residual3;
  site.chunk.first_layer = store.chunk.first_layer + i;
  if (kept) {
    site.ln1 = kept->ln1;
    site.ln1_bf16 = kept->ln1_bf16;
    site.ln1_mean = kept->ln1_mean;
    site.ln1_rstd = kept->ln1_rstd;
    site.atty = kept->atty;
    site.atty_bf16 = kept->atty_bf16;
    site.attn_out = kept->attn_out;
    site.residual2 = kept->residual2;
    site.ln2 = kept->ln2;
    site.ln2_bf16 = kept->ln2_bf16;
    site.ln2_mean = kept->ln2_mean;
    site.ln2_rstd = kept->ln2_rstd;
    site.fch_gelu = kept->fch_gelu;
    site.fch_gelu_bf16 = kept->fch_gelu_bf16;
    site.mlp_out = kept->mlp_out;
    site.moe_in = kept->moe_in;
    site.moe_in_bf16 = kept->moe_in_bf16;
    site.shared_h = kept->shared_h;
    site.shared_h_bf16 = kept->shared_h_bf16;
    site.mla = kept->mla;
  }
  return {site, 0};
}

// Tells the gate (if any) that block i of the chunk is about to be used, and that block `next`
// of it follows (none when outside the chunk).
void enter_block(const ParameterTensors& params, const Activations& acts, int i, BlockGate::Use use,
                 int next) {
  if (!params.gate) return;
  const int first = acts.chunk.first_layer;
  const bool has_next = next >= 0 && next < acts.chunk.layers;
  params.gate->enter(first + i, use, has_next ? first + next : -1);
}
// A block's W: its gradients final for the step, or, leaving after each microbatch, for this one.
bool weight_final(const ParameterTensors& params, bool final_microbatch) {
  return final_microbatch || (params.gate && params.gate->grads_per_microbatch());
}
void weight_done(const ParameterTensors& params, const Activations& acts, int i) {
  if (params.gate) params.gate->weight_done(acts.chunk.first_layer + i);
}
}  // namespace

void gpt_forward(Activations& acts, const ParameterTensors& params, const Tokens& inputs,
                 const Tokens& targets, MPI_Comm tp, Activations* workspace) {
  if (acts.chunk.embedding) embedding_forward(acts, params, inputs, tp);
  for (int i = 0; i < acts.chunk.layers; ++i) {
    enter_block(params, acts, i, BlockGate::Use::kForward, i + 1);
    BlockSite b = block_site(acts, workspace, i, nullptr, /*forward=*/true);
    block_forward(b.acts, params, b.index, tp);
  }
  if (acts.chunk.head) head_forward(acts, params, targets, tp);
}

namespace {
// Without SP a block's output gradient (R,C) lives in its W inputs' dout, whose first R rows it
// takes (a mixture of experts' dout holds R·k rows, B rewrites them after reading it).
Tensor output_grad_slot(const BlockWeightInputs& w, const Activations& acts) {
  return Tensor(w.dout.data(), acts.seq.rows * acts.cfg.channels);
}
// The head's output gradient plus what the multi-token prediction modules give h_0 (mtp.hpp).
void add_extra_output_grad(const Activations& acts, Tensor dout) {
  if (acts.extra_output_grad.extent(0) == 0) return;
  add_into(dout, acts.extra_output_grad.data(), acts.seq.local_rows * acts.cfg.channels);
}
}  // namespace

void gpt_backward_input(BackwardBuffers& buf, WeightGradInputs& w, Activations& acts,
                        const ParameterTensors& params, const Tokens& targets, float dloss,
                        MPI_Comm tp, Tensor input_grad, Activations* workspace) {
  acts.dloss = dloss;  // the balance losses' gradients scale with it
  const ChunkPieces& chunk = acts.chunk;
  const bool sp = acts.seq.on;
  const int L = chunk.layers;  // >= 1: every chunk holds a block
  // dout: the gradient of the current block's output, this rank's rows. Without SP those are all
  // the rows, and it lives in the block's slot of w, where W reads it (each block's input
  // gradient is written straight into the slot of the block below); with SP the blocks' input
  // gradients ping-pong between the two dresidual buffers (`spare` is the one not holding dout)
  // and each block's B gathers its dout into its slot.
  Tensor dout = sp ? buf.dresidual[0] : output_grad_slot(w.block(L - 1), acts);
  int spare = 1;
  if (chunk.head) {
    head_backward_input(buf, w, acts, params, targets, dloss, tp, dout);
    add_extra_output_grad(acts, dout);
  } else if (sp) {
    dout = acts.output_grad;
    spare = 0;
  } else {
    // Received; W of the top block reads it later. In stream order, no wait.
    Kokkos::deep_copy(ExecSpace(), dout, acts.output_grad);
  }
  for (int i = L - 1; i >= 0; --i) {
    Tensor dinp;
    if (i > 0) {
      dinp = sp ? buf.dresidual[spare] : output_grad_slot(w.block(i - 1), acts);
    } else if (chunk.embedding) {
      dinp = sp ? buf.dresidual[spare] : w.dembed;
    } else {
      dinp = input_grad;  // to send
    }
    const BlockWeightInputs wb = w.block(i);
    enter_block(params, acts, i, BlockGate::Use::kBackward, i - 1);
    BlockSite b = block_site(acts, workspace, i, chunk.recompute ? &wb.kept : nullptr);
    if (workspace) block_forward(b.acts, params, b.index, tp);  // deterministic: same values
    block_backward_input(buf, wb, dinp, dout, b.acts, params, b.index, tp);
    spare = 1 - spare;
    dout = dinp;
  }
  if (chunk.embedding)
    tp::leave_backward(dout.data(), w.dembed.data(), acts.cfg.channels, acts.seq, tp);
}

void gpt_backward_weight(ParameterTensors& grads, const WeightGradInputs& w,
                         const Activations& acts, const ParameterTensors& params,
                         const Tokens& inputs, MPI_Comm tp, const PartDone& part_done,
                         bool final_microbatch, Activations* workspace) {
  const ChunkPieces& chunk = acts.chunk;
  using Kind = ModelPart::Kind;
  auto done = [&](Kind kind, int block) {
    if (part_done) part_done({kind, block});
  };
  if (chunk.head) {
    head_backward_weight(grads, w, acts, tp, final_microbatch);
    done(Kind::kHead, -1);
  }
  for (int i = chunk.layers - 1; i >= 0; --i) {
    const BlockWeightInputs wb = w.block(i);
    enter_block(params, acts, i, BlockGate::Use::kWeight, i - 1);
    const BlockSite b = block_site(acts, workspace, i, chunk.recompute ? &wb.kept : nullptr);
    block_backward_weight(grads, wb, b.acts, params, b.index, tp,
                          weight_final(params, final_microbatch));
    weight_done(params, acts, i);
    done(Kind::kBlock, chunk.first_layer + i);
  }
  if (chunk.embedding) {
    embedding_backward_weight(grads, w.dembed, acts, inputs);
    done(Kind::kEmbedding, -1);
  }
}

void gpt_backward_by_block(ParameterTensors& grads, BackwardBuffers& buf, WeightGradInputs& w2,
                           Activations& acts, const ParameterTensors& params, const Tokens& inputs,
                           const Tokens& targets, float dloss, MPI_Comm tp, Tensor input_grad,
                           Activations* workspace, const PartDone& part_done,
                           bool final_microbatch) {
  acts.dloss = dloss;
  const ChunkPieces& chunk = acts.chunk;
  const bool sp = acts.seq.on;
  const int L = chunk.layers;
  using Kind = ModelPart::Kind;
  auto done = [&](Kind kind, int block) {
    if (part_done) part_done({kind, block});
  };
  auto slot = [&](int i) { return w2.block(i % 2); };
  // dout as in gpt_backward_input, its slot the block's own.
  Tensor dout = sp ? buf.dresidual[0] : output_grad_slot(slot(L - 1), acts);
  int spare = 1;
  if (chunk.head) {
    if (chunk.logit_rows > 0) {
      head_backward_in_pieces(grads, buf, w2, acts, params, targets, dloss, tp, dout,
                              final_microbatch);
    } else {
      head_backward_input(buf, w2, acts, params, targets, dloss, tp, dout);
      head_backward_weight(grads, w2, acts, tp, final_microbatch);
    }
    add_extra_output_grad(acts, dout);
    done(Kind::kHead, -1);
  } else if (sp) {
    dout = acts.output_grad;
    spare = 0;
  } else {
    Kokkos::deep_copy(ExecSpace(), dout, acts.output_grad);
  }
  for (int i = L - 1; i >= 0; --i) {
    Tensor dinp;
    if (i > 0) {
      dinp = sp ? buf.dresidual[spare] : output_grad_slot(slot(i - 1), acts);  // W of i+1 done
    } else if (chunk.embedding) {
      dinp = sp ? buf.dresidual[spare] : w2.dembed;
    } else {
      dinp = input_grad;
    }
    const BlockWeightInputs wb = slot(i);
    // Recomputed, the block's activations stay in the workspace until its W, right after its B:
    // the W inputs need no copy of them (their `kept` is empty).
    enter_block(params, acts, i, BlockGate::Use::kBackward, i - 1);
    BlockSite b = block_site(acts, workspace, i);
    if (workspace) block_forward(b.acts, params, b.index, tp);
    std::optional<HeldOnFirstUse> dys;
    hold_output_gradients(dys, wb, b.acts, params, b.index);
    block_backward_input(buf, wb, dinp, dout, b.acts, params, b.index, tp);
    enter_block(params, acts, i, BlockGate::Use::kWeight, -1);
    block_backward_weight(grads, wb, b.acts, params, b.index, tp,
                          weight_final(params, final_microbatch));
    weight_done(params, acts, i);
    done(Kind::kBlock, chunk.first_layer + i);
    spare = 1 - spare;
    dout = dinp;
  }
  if (chunk.embedding) {
    tp::leave_backward(dout.data(), w2.dembed.data(), acts.cfg.channels, acts.seq, tp);
    embedding_backward_weight(grads, w2.dembed, acts, inputs);
    done(Kind::kEmbedding, -1);
  }
}

void gpt_backward(ParameterTensors& grads, BackwardBuffers& buf, WeightGradInputs& w,
                  Activations& acts, const ParameterTensors& params, const Tokens& inputs,
                  const Tokens& targets, float dloss, MPI_Comm tp, const PartDone& part_done,
                  bool final_microbatch, Tensor input_grad, Activations* workspace) {
  gpt_backward_input(buf, w, acts, params, targets, dloss, tp, input_grad, workspace);
  gpt_backward_weight(grads, w, acts, params, inputs, tp, part_done, final_microbatch, workspace);
}

}  // namespace mpf
