#include "model/gpt.hpp"

#include "model/layers/attention.hpp"
#include "model/layers/cross_entropy.hpp"
#include "model/layers/encoder.hpp"
#include "model/layers/gelu.hpp"
#include "model/layers/layernorm.hpp"
#include "model/layers/linear.hpp"

namespace mpf {

namespace {
Tensor layer_slice(const Tensor& t, int l, int64_t per_layer) {
  return Tensor(t.data() + l * per_layer, per_layer);
}
}  // namespace

LayerParameters layer_parameters(const ParameterTensors& p, const GPTConfig& cfg, int l) {
  const int64_t C = cfg.channels;
  LayerParameters x;
  x.ln1w = layer_slice(p.ln1w, l, C);
  x.ln1b = layer_slice(p.ln1b, l, C);
  x.qkvw = layer_slice(p.qkvw, l, 3 * C * C);
  x.qkvb = layer_slice(p.qkvb, l, 3 * C);
  x.attprojw = layer_slice(p.attprojw, l, C * C);
  x.attprojb = layer_slice(p.attprojb, l, C);
  x.ln2w = layer_slice(p.ln2w, l, C);
  x.ln2b = layer_slice(p.ln2b, l, C);
  x.fcw = layer_slice(p.fcw, l, 4 * C * C);
  x.fcb = layer_slice(p.fcb, l, 4 * C);
  x.fcprojw = layer_slice(p.fcprojw, l, 4 * C * C);
  x.fcprojb = layer_slice(p.fcprojb, l, C);
  return x;
}

void embedding_forward(Activations& acts, const ParameterTensors& params, const Tokens& inputs) {
  encoder_forward(acts.encoded, inputs, params.wte, params.wpe, acts.B, acts.T, acts.cfg.channels);
}

void block_forward(Activations& acts, const ParameterTensors& params, int l) {
  const GPTConfig& cfg = acts.cfg;
  const int C = cfg.channels;
  const int64_t BT = int64_t(acts.B) * acts.T;
  const LayerParameters p = layer_parameters(params, cfg, l);
  const LayerActivations a = acts.layer(l);
  const Tensor x = acts.block_input(l);
  const Tensor none;
  layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, p.ln1w, p.ln1b, BT, C);
  linear_forward(a.qkv, none, a.ln1, p.qkvw, p.qkvb, BT, C, 3 * C);
  attention_forward(a.atty, a.att, a.qkv, acts.B, acts.T, C, cfg.heads);
  linear_forward(a.residual2, x, a.atty, p.attprojw, p.attprojb, BT, C, C);
  layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, p.ln2w, p.ln2b, BT, C);
  linear_forward(a.fch, none, a.ln2, p.fcw, p.fcb, BT, C, 4 * C);
  gelu_forward(a.fch_gelu, a.fch, BT * 4 * C);
  linear_forward(a.residual3, a.residual2, a.fch_gelu, p.fcprojw, p.fcprojb, BT, 4 * C, C);
}

void head_forward(Activations& acts, const ParameterTensors& params, const Tokens& targets) {
  const GPTConfig& cfg = acts.cfg;
  const int64_t BT = int64_t(acts.B) * acts.T;
  const Tensor none;
  layernorm_forward(acts.lnf, acts.lnf_mean, acts.lnf_rstd, acts.layer(cfg.layers - 1).residual3,
                    params.lnfw, params.lnfb, BT, cfg.channels);
  linear_forward(acts.logits, none, acts.lnf, params.wte, none, BT, cfg.channels, cfg.padded_vocab);
  cross_entropy_forward(acts.losses, acts.logits, targets, BT, cfg.vocab, cfg.padded_vocab);
}

void head_backward_input(BackwardBuffers& buf, Activations& acts, const ParameterTensors& params,
                         const Tokens& targets, float dloss) {
  const GPTConfig& cfg = acts.cfg;
  const int64_t BT = int64_t(acts.B) * acts.T;
  const Tensor none;
  cross_entropy_backward_input(acts.logits, acts.logits, targets, dloss, BT, cfg.padded_vocab);
  linear_backward_input(buf.dln, acts.logits, params.wte, BT, cfg.channels, cfg.padded_vocab);
  layernorm_backward_input(buf.dresidual[0], none, buf.dln, acts.layer(cfg.layers - 1).residual3,
                           acts.lnf_mean, acts.lnf_rstd, params.lnfw, BT, cfg.channels);
}

void head_backward_weight(ParameterTensors& grads, const BackwardBuffers& buf,
                          const Activations& acts) {
  const GPTConfig& cfg = acts.cfg;
  const int64_t BT = int64_t(acts.B) * acts.T;
  const Tensor none;
  linear_backward_weight(grads.wte, none, acts.logits, acts.lnf, BT, cfg.channels,
                         cfg.padded_vocab);
  layernorm_backward_weight(grads.lnfw, grads.lnfb, buf.dln, acts.layer(cfg.layers - 1).residual3,
                            acts.lnf_mean, acts.lnf_rstd, BT, cfg.channels);
}

void block_backward_input(BackwardBuffers& buf, Tensor dinp, Tensor dout, const Activations& acts,
                          const ParameterTensors& params, int l) {
  const GPTConfig& cfg = acts.cfg;
  const int C = cfg.channels;
  const int64_t BT = int64_t(acts.B) * acts.T;
  const LayerParameters p = layer_parameters(params, cfg, l);
  const LayerActivations a = acts.layer(l);
  // The forward, bottom-up.
  linear_backward_input(buf.dfch, dout, p.fcprojw, BT, 4 * C, C);
  gelu_backward_input(buf.dfch, buf.dfch, a.fch, BT * 4 * C);
  linear_backward_input(buf.dln2, buf.dfch, p.fcw, BT, C, 4 * C);
  layernorm_backward_input(buf.dresidual2, dout, buf.dln2, a.residual2, a.ln2_mean, a.ln2_rstd,
                           p.ln2w, BT, C);
  linear_backward_input(buf.datty, buf.dresidual2, p.attprojw, BT, C, C);
  attention_backward_input(buf.dqkv, buf.datt, buf.datty, a.qkv, a.att, acts.B, acts.T, C,
                           cfg.heads);
  linear_backward_input(buf.dln, buf.dqkv, p.qkvw, BT, C, 3 * C);
  layernorm_backward_input(dinp, buf.dresidual2, buf.dln, acts.block_input(l), a.ln1_mean,
                           a.ln1_rstd, p.ln1w, BT, C);
}

void block_backward_weight(ParameterTensors& grads, const BackwardBuffers& buf, Tensor dout,
                           const Activations& acts, int l) {
  const GPTConfig& cfg = acts.cfg;
  const int C = cfg.channels;
  const int64_t BT = int64_t(acts.B) * acts.T;
  const LayerParameters g = layer_parameters(grads, cfg, l);
  const LayerActivations a = acts.layer(l);
  linear_backward_weight(g.fcprojw, g.fcprojb, dout, a.fch_gelu, BT, 4 * C, C);
  linear_backward_weight(g.fcw, g.fcb, buf.dfch, a.ln2, BT, C, 4 * C);
  layernorm_backward_weight(g.ln2w, g.ln2b, buf.dln2, a.residual2, a.ln2_mean, a.ln2_rstd, BT, C);
  linear_backward_weight(g.attprojw, g.attprojb, buf.dresidual2, a.atty, BT, C, C);
  linear_backward_weight(g.qkvw, g.qkvb, buf.dqkv, a.ln1, BT, C, 3 * C);
  layernorm_backward_weight(g.ln1w, g.ln1b, buf.dln, acts.block_input(l), a.ln1_mean, a.ln1_rstd,
                            BT, C);
}

void embedding_backward_weight(ParameterTensors& grads, Tensor dout, const Activations& acts,
                               const Tokens& inputs) {
  encoder_backward_weight(grads.wte, grads.wpe, dout, inputs, acts.B, acts.T, acts.cfg.channels);
}

void gpt_forward(Activations& acts, const ParameterTensors& params, const Tokens& inputs,
                 const Tokens& targets) {
  embedding_forward(acts, params, inputs);
  for (int l = 0; l < acts.cfg.layers; ++l) block_forward(acts, params, l);
  head_forward(acts, params, targets);
}

void gpt_backward(ParameterTensors& grads, BackwardBuffers& buf, Activations& acts,
                  const ParameterTensors& params, const Tokens& inputs, const Tokens& targets,
                  float dloss) {
  head_backward_input(buf, acts, params, targets, dloss);
  head_backward_weight(grads, buf, acts);
  int cur = 0;  // buf.dresidual[cur] holds the gradient of the current block's output
  for (int l = acts.cfg.layers - 1; l >= 0; --l) {
    block_backward_input(buf, buf.dresidual[1 - cur], buf.dresidual[cur], acts, params, l);
    block_backward_weight(grads, buf, buf.dresidual[cur], acts, l);
    cur = 1 - cur;
  }
  embedding_backward_weight(grads, buf.dresidual[cur], acts, inputs);
}

}  // namespace mpf
