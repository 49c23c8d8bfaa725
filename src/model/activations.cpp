#include "model/activations.hpp"

#include <vector>

namespace mpf {

namespace {
// Hands out consecutive windows of a slab; first a pass that only counts, then one that binds.
class SlabCarver {
 public:
  explicit SlabCarver(float* base) : base_(base) {}
  Tensor take(int64_t n) {
    Tensor t(base_ ? base_ + used_ : nullptr, base_ ? n : 0);
    used_ += n;
    return t;
  }
  int64_t used() const { return used_; }

 private:
  float* base_;
  int64_t used_ = 0;
};

Tensor slice(const Tensor& t, int64_t offset, int64_t n) {
  return Tensor(t.data() + offset, n);
}

void carve(Activations& a, SlabCarver& k) {
  const TpShard& s = a.shard;
  const int64_t B = a.B, T = a.T, C = a.cfg.channels, L = a.cfg.layers;
  const int64_t BT = B * T;
  a.encoded = k.take(BT * C);
  a.ln1 = k.take(L * BT * C);
  a.ln1_mean = k.take(L * BT);
  a.ln1_rstd = k.take(L * BT);
  a.qkv = k.take(L * BT * 3 * s.attn);
  a.atty = k.take(L * BT * s.attn);
  a.att = k.take(L * B * s.heads * T * T);
  a.residual2 = k.take(L * BT * C);
  a.ln2 = k.take(L * BT * C);
  a.ln2_mean = k.take(L * BT);
  a.ln2_rstd = k.take(L * BT);
  a.fch = k.take(L * BT * s.fc);
  a.fch_gelu = k.take(L * BT * s.fc);
  a.residual3 = k.take(L * BT * C);
  a.lnf = k.take(BT * C);
  a.lnf_mean = k.take(BT);
  a.lnf_rstd = k.take(BT);
  a.logits = k.take(BT * s.vocab_shard);
  a.row_stats = k.take(3 * BT);
  a.losses = k.take(BT);
}

void carve(BackwardBuffers& g, SlabCarver& k, const TpShard& s, int64_t B, int64_t T) {
  const int64_t BT = B * T, C = s.cfg.channels;
  g.dresidual[0] = k.take(BT * C);
  g.dresidual[1] = k.take(BT * C);
  g.dresidual2 = k.take(BT * C);
  g.dln = k.take(BT * C);
  g.dln2 = k.take(BT * C);
  g.datty = k.take(BT * s.attn);
  g.dfch = k.take(BT * s.fc);
  g.dqkv = k.take(BT * 3 * s.attn);
  g.datt = k.take(B * s.heads * T * T);
}
}  // namespace

Activations Activations::allocate(const GPTConfig& cfg, int B, int T) {
  return allocate(make_tp_shard(cfg, 0, 1), B, T);
}

Activations Activations::allocate(const TpShard& shard, int B, int T) {
  Activations a;
  a.cfg = shard.cfg;
  a.shard = shard;
  a.B = B;
  a.T = T;
  SlabCarver counter(nullptr);
  carve(a, counter);
  a.slab = Slab("mpf::activations", counter.used());
  SlabCarver binder(a.slab.data());
  carve(a, binder);
  return a;
}

LayerActivations Activations::layer(int l) const {
  const int64_t BT = int64_t(B) * T, C = cfg.channels;
  const int64_t bt_c = BT * C, bt = BT, tt = int64_t(B) * shard.heads * T * T;
  const int64_t bt_a = BT * shard.attn, bt_f = BT * shard.fc;
  LayerActivations x;
  x.ln1 = slice(ln1, l * bt_c, bt_c);
  x.ln1_mean = slice(ln1_mean, l * bt, bt);
  x.ln1_rstd = slice(ln1_rstd, l * bt, bt);
  x.qkv = slice(qkv, l * 3 * bt_a, 3 * bt_a);
  x.atty = slice(atty, l * bt_a, bt_a);
  x.att = slice(att, l * tt, tt);
  x.residual2 = slice(residual2, l * bt_c, bt_c);
  x.ln2 = slice(ln2, l * bt_c, bt_c);
  x.ln2_mean = slice(ln2_mean, l * bt, bt);
  x.ln2_rstd = slice(ln2_rstd, l * bt, bt);
  x.fch = slice(fch, l * bt_f, bt_f);
  x.fch_gelu = slice(fch_gelu, l * bt_f, bt_f);
  x.residual3 = slice(residual3, l * bt_c, bt_c);
  return x;
}

Tensor Activations::block_input(int l) const {
  return l == 0 ? encoded : layer(l - 1).residual3;
}

BackwardBuffers BackwardBuffers::allocate(const GPTConfig& cfg, int B, int T) {
  return allocate(make_tp_shard(cfg, 0, 1), B, T);
}

BackwardBuffers BackwardBuffers::allocate(const TpShard& shard, int B, int T) {
  BackwardBuffers g;
  SlabCarver counter(nullptr);
  carve(g, counter, shard, B, T);
  g.slab = Slab("mpf::backward_buffers", counter.used());
  SlabCarver binder(g.slab.data());
  carve(g, binder, shard, B, T);
  return g;
}

}  // namespace mpf
