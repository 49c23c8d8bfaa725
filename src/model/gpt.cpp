#include "model/gpt.hpp"

#include "model/layers/attention.hpp"
#include "model/layers/cross_entropy.hpp"
#include "model/layers/encoder.hpp"
#include "model/layers/gelu.hpp"
#include "model/layers/layernorm.hpp"
#include "model/layers/linear.hpp"
#include "parallel/tp_regions.hpp"

namespace mpf {

namespace {
Tensor layer_slice(const Tensor& t, int l, int64_t per_layer) {
  return Tensor(t.data() + l * per_layer, per_layer);
}
}  // namespace

LayerParameters layer_parameters(const ParameterTensors& p, const TpShard& s, int l) {
  const int64_t C = s.cfg.channels;
  LayerParameters x;
  x.ln1w = layer_slice(p.ln1w, l, C);
  x.ln1b = layer_slice(p.ln1b, l, C);
  x.qkvw = layer_slice(p.qkvw, l, 3 * s.attn * C);
  x.qkvb = layer_slice(p.qkvb, l, 3 * s.attn);
  x.attprojw = layer_slice(p.attprojw, l, C * s.attn);
  x.attprojb = layer_slice(p.attprojb, l, C);
  x.ln2w = layer_slice(p.ln2w, l, C);
  x.ln2b = layer_slice(p.ln2b, l, C);
  x.fcw = layer_slice(p.fcw, l, s.fc * C);
  x.fcb = layer_slice(p.fcb, l, s.fc);
  x.fcprojw = layer_slice(p.fcprojw, l, C * s.fc);
  x.fcprojb = layer_slice(p.fcprojb, l, C);
  return x;
}

void embedding_forward(Activations& acts, const ParameterTensors& params, const Tokens& inputs,
                       MPI_Comm tp) {
  const TpShard& s = acts.shard;
  const int C = acts.cfg.channels;
  encoder_forward(acts.encoded, inputs, params.wte, params.wpe, acts.B, acts.T, C, s.vocab_begin,
                  s.vocab_shard, /*add_positions=*/s.rank == 0);
  tp::reduce_from_region_forward(acts.encoded.data(), int64_t(acts.B) * acts.T * C, tp);  // g
}

void block_forward(Activations& acts, const ParameterTensors& params, int l, MPI_Comm tp) {
  const TpShard& s = acts.shard;
  const int C = acts.cfg.channels;
  const int64_t BT = int64_t(acts.B) * acts.T;
  const LayerParameters p = layer_parameters(params, s, l);
  const LayerActivations a = acts.layer(l);
  const Tensor x = acts.block_input(l);
  const Tensor none;
  // A row-parallel output is the sum over ranks of partial products: the residual and the bias
  // are seeded on rank 0 only, so g's all-reduce adds them once.
  const bool seed = s.rank == 0;
  layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, p.ln1w, p.ln1b, BT, C);
  // f (identity), then column-parallel QKV: this rank's heads.
  linear_forward(a.qkv, none, a.ln1, p.qkvw, p.qkvb, BT, C, 3 * s.attn);
  attention_forward(a.atty, a.att, a.qkv, acts.B, acts.T, s.attn, s.heads);
  linear_forward(a.residual2, seed ? x : none, a.atty, p.attprojw, seed ? p.attprojb : none, BT,
                 s.attn, C);
  tp::reduce_from_region_forward(a.residual2.data(), BT * C, tp);  // g
  layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, p.ln2w, p.ln2b, BT, C);
  // f (identity), then column-parallel fc, GELU, row-parallel proj, g.
  linear_forward(a.fch, none, a.ln2, p.fcw, p.fcb, BT, C, s.fc);
  gelu_forward(a.fch_gelu, a.fch, BT * s.fc);
  linear_forward(a.residual3, seed ? a.residual2 : none, a.fch_gelu, p.fcprojw,
                 seed ? p.fcprojb : none, BT, s.fc, C);
  tp::reduce_from_region_forward(a.residual3.data(), BT * C, tp);  // g
}

void head_forward(Activations& acts, const ParameterTensors& params, const Tokens& targets,
                  MPI_Comm tp) {
  const TpShard& s = acts.shard;
  const GPTConfig& cfg = acts.cfg;
  const int64_t BT = int64_t(acts.B) * acts.T;
  const Tensor none;
  layernorm_forward(acts.lnf, acts.lnf_mean, acts.lnf_rstd, acts.layer(cfg.layers - 1).residual3,
                    params.lnfw, params.lnfb, BT, cfg.channels);
  // f (identity), then the logits of this rank's vocabulary shard.
  linear_forward(acts.logits, none, acts.lnf, params.wte, none, BT, cfg.channels, s.vocab_shard);
  cross_entropy_forward(acts.losses, acts.logits, acts.row_stats, targets, BT, cfg.vocab,
                        s.vocab_begin, s.vocab_shard, tp);
}

void head_backward_input(BackwardBuffers& buf, Activations& acts, const ParameterTensors& params,
                         const Tokens& targets, float dloss, MPI_Comm tp) {
  const TpShard& s = acts.shard;
  const GPTConfig& cfg = acts.cfg;
  const int64_t BT = int64_t(acts.B) * acts.T;
  const Tensor none;
  cross_entropy_backward_input(acts.logits, acts.logits, targets, dloss, BT, s.vocab_begin,
                               s.vocab_shard);
  linear_backward_input(buf.dln, acts.logits, params.wte, BT, cfg.channels, s.vocab_shard);
  tp::copy_to_region_backward(buf.dln.data(), BT * cfg.channels, tp);  // f
  layernorm_backward_input(buf.dresidual[0], none, buf.dln, acts.layer(cfg.layers - 1).residual3,
                           acts.lnf_mean, acts.lnf_rstd, params.lnfw, BT, cfg.channels);
}

void head_backward_weight(ParameterTensors& grads, const BackwardBuffers& buf,
                          const Activations& acts) {
  const GPTConfig& cfg = acts.cfg;
  const int64_t BT = int64_t(acts.B) * acts.T;
  const Tensor none;
  linear_backward_weight(grads.wte, none, acts.logits, acts.lnf, BT, cfg.channels,
                         acts.shard.vocab_shard);
  layernorm_backward_weight(grads.lnfw, grads.lnfb, buf.dln, acts.layer(cfg.layers - 1).residual3,
                            acts.lnf_mean, acts.lnf_rstd, BT, cfg.channels);
}

void block_backward_input(BackwardBuffers& buf, Tensor dinp, Tensor dout, const Activations& acts,
                          const ParameterTensors& params, int l, MPI_Comm tp) {
  const TpShard& s = acts.shard;
  const int C = acts.cfg.channels;
  const int64_t BT = int64_t(acts.B) * acts.T;
  const LayerParameters p = layer_parameters(params, s, l);
  const LayerActivations a = acts.layer(l);
  // The forward, bottom-up. g's backward is the identity: dout is whole on every rank.
  linear_backward_input(buf.dfch, dout, p.fcprojw, BT, s.fc, C);
  gelu_backward_input(buf.dfch, buf.dfch, a.fch, BT * s.fc);
  linear_backward_input(buf.dln2, buf.dfch, p.fcw, BT, C, s.fc);
  tp::copy_to_region_backward(buf.dln2.data(), BT * C, tp);  // f
  layernorm_backward_input(buf.dresidual2, dout, buf.dln2, a.residual2, a.ln2_mean, a.ln2_rstd,
                           p.ln2w, BT, C);
  linear_backward_input(buf.datty, buf.dresidual2, p.attprojw, BT, s.attn, C);
  attention_backward_input(buf.dqkv, buf.datt, buf.datty, a.qkv, a.att, acts.B, acts.T, s.attn,
                           s.heads);
  linear_backward_input(buf.dln, buf.dqkv, p.qkvw, BT, C, 3 * s.attn);
  tp::copy_to_region_backward(buf.dln.data(), BT * C, tp);  // f
  layernorm_backward_input(dinp, buf.dresidual2, buf.dln, acts.block_input(l), a.ln1_mean,
                           a.ln1_rstd, p.ln1w, BT, C);
}

void block_backward_weight(ParameterTensors& grads, const BackwardBuffers& buf, Tensor dout,
                           const Activations& acts, int l) {
  const TpShard& s = acts.shard;
  const int C = acts.cfg.channels;
  const int64_t BT = int64_t(acts.B) * acts.T;
  const LayerParameters g = layer_parameters(grads, s, l);
  const LayerActivations a = acts.layer(l);
  linear_backward_weight(g.fcprojw, g.fcprojb, dout, a.fch_gelu, BT, s.fc, C);
  linear_backward_weight(g.fcw, g.fcb, buf.dfch, a.ln2, BT, C, s.fc);
  layernorm_backward_weight(g.ln2w, g.ln2b, buf.dln2, a.residual2, a.ln2_mean, a.ln2_rstd, BT, C);
  linear_backward_weight(g.attprojw, g.attprojb, buf.dresidual2, a.atty, BT, s.attn, C);
  linear_backward_weight(g.qkvw, g.qkvb, buf.dqkv, a.ln1, BT, C, 3 * s.attn);
  layernorm_backward_weight(g.ln1w, g.ln1b, buf.dln, acts.block_input(l), a.ln1_mean, a.ln1_rstd,
                            BT, C);
}

void embedding_backward_weight(ParameterTensors& grads, Tensor dout, const Activations& acts,
                               const Tokens& inputs) {
  const TpShard& s = acts.shard;
  encoder_backward_weight(grads.wte, grads.wpe, dout, inputs, acts.B, acts.T, acts.cfg.channels,
                          s.vocab_begin, s.vocab_shard);
}

void gpt_forward(Activations& acts, const ParameterTensors& params, const Tokens& inputs,
                 const Tokens& targets, MPI_Comm tp) {
  embedding_forward(acts, params, inputs, tp);
  for (int l = 0; l < acts.cfg.layers; ++l) block_forward(acts, params, l, tp);
  head_forward(acts, params, targets, tp);
}

void gpt_backward(ParameterTensors& grads, BackwardBuffers& buf, Activations& acts,
                  const ParameterTensors& params, const Tokens& inputs, const Tokens& targets,
                  float dloss, MPI_Comm tp, const std::function<void(int event)>& grads_final) {
  const int L = acts.cfg.layers;
  auto final_after = [&](int event) {
    if (grads_final) grads_final(event);
  };
  head_backward_input(buf, acts, params, targets, dloss, tp);
  head_backward_weight(grads, buf, acts);
  final_after(0);
  int cur = 0;  // buf.dresidual[cur] holds the gradient of the current block's output
  for (int l = L - 1; l >= 0; --l) {
    block_backward_input(buf, buf.dresidual[1 - cur], buf.dresidual[cur], acts, params, l, tp);
    block_backward_weight(grads, buf, buf.dresidual[cur], acts, l);
    final_after(1 + (L - 1 - l));
    cur = 1 - cur;
  }
  embedding_backward_weight(grads, buf.dresidual[cur], acts, inputs);
  final_after(L + 1);
}

}  // namespace mpf
