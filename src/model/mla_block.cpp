#include "model/mla_block.hpp"

#include "core/parallel.hpp"
#include "model/block_parts.hpp"
#include "model/layers/linear.hpp"
#include "model/layers/rmsnorm.hpp"
#include "model/layers/rope.hpp"
#include "parallel/device_mpi.hpp"

namespace mpf {

namespace {

// The sizes of a rank's MLA: the ranks, the head parts, its heads H.
struct MlaDims {
  int64_t C, qr, kvr, dn, dr, dv, hs, H;
  explicit MlaDims(const TpShard& s)
      : C(s.cfg.channels),
        qr(s.cfg.q_lora_rank),
        kvr(s.cfg.kv_lora_rank),
        dn(s.cfg.qk_nope_dim),
        dr(s.cfg.qk_rope_dim),
        dv(s.cfg.v_head_dim),
        hs(s.cfg.qk_nope_dim + s.cfg.qk_rope_dim),
        H(s.heads) {}
  int64_t q() const { return H * hs; }          // q_b's output
  int64_t kv() const { return H * (dn + dv); }  // kv_b's output
  int64_t kva() const { return kvr + dr; }      // kv_a's output
  int64_t o() const { return H * dv; }          // o_proj's input
};

// Consecutive windows of a block's MLA tensor.
class Windows {
 public:
  explicit Windows(float* base) : at_(base) {}
  Tensor take(int64_t n) {
    Tensor t(at_, at_ ? n : 0);
    if (at_) at_ += n;
    used_ += n;
    return t;
  }
  int64_t used() const { return used_; }

 private:
  float* at_;
  int64_t used_ = 0;
};

// What the forward keeps: q_a's output, its 1/rms and norm (with a query rank), q_b's output,
// kv_a's output, its latent copied apart, the latent's 1/rms and norm, kv_b's output, and the
// attention's V parts (o_proj's input).
struct MlaActs {
  Tensor qa, qa_rstd, qan, q, kva, lat, lat_rstd, latn, kv, o;
};
MlaActs mla_acts(Windows& w, const MlaDims& d, int64_t R) {
  MlaActs m;
  m.qa = w.take(R * d.qr);
  m.qa_rstd = w.take(d.qr > 0 ? R : 0);
  m.qan = w.take(R * d.qr);
  m.q = w.take(R * d.q());
  m.kva = w.take(R * d.kva());
  m.lat = w.take(R * d.kvr);
  m.lat_rstd = w.take(R);
  m.latn = w.take(R * d.kvr);
  m.kv = w.take(R * d.kv());
  m.o = w.take(R * d.o());
  return m;
}

// What B leaves for W: dq, dqa, dkv, dkva, the norms' weight gradients [q_a's | kv_a's].
struct MlaGrads {
  Tensor dq, dqa, dkv, dkva, dnormw;
};
// B's scratch, one block's (BackwardBuffers::mla): o_proj's input gradient, the norms' output and
// input gradients, one input's share of ln1's gradient.
struct MlaScratch {
  Tensor dout, dqan, dlatn, dlat, dx;
};
MlaGrads mla_grads(Windows& w, const MlaDims& d, int64_t R) {
  MlaGrads g;
  g.dq = w.take(R * d.q());
  g.dqa = w.take(R * d.qr);
  g.dkv = w.take(R * d.kv());
  g.dkva = w.take(R * d.kva());
  g.dnormw = w.take(d.qr + d.kvr);
  return g;
}
MlaScratch mla_scratch(Windows& w, const MlaDims& d, int64_t R) {
  MlaScratch b;
  b.dout = w.take(R * d.o());
  b.dqan = w.take(R * d.qr);
  b.dlatn = w.take(R * d.kvr);
  b.dlat = w.take(R * d.kvr);
  b.dx = w.take(R * d.C);
  return b;
}
MlaActs mla_acts(const Tensor& blob, const MlaDims& d, int64_t R) {
  Windows w(blob.data());
  return mla_acts(w, d, R);
}
MlaGrads mla_grads(const Tensor& blob, const MlaDims& d, int64_t R) {
  Windows w(blob.data());
  return mla_grads(w, d, R);
}
MlaScratch mla_scratch(const Tensor& blob, const MlaDims& d, int64_t R) {
  Windows w(blob.data());
  return mla_scratch(w, d, R);
}

// dst[n·dst_row + h·dst_head + j] = src[n·src_row + h·src_head + j] for j < width.
void copy_heads(float* dst, int64_t dst_row, int64_t dst_head, const float* src, int64_t src_row,
                int64_t src_head, int64_t rows, int64_t heads, int64_t width) {
  for_each(
      "mpf::mla_copy_heads", rows * heads, KOKKOS_LAMBDA(int64_t e) {
        const int64_t n = e / heads, h = e % heads;
        float* y = dst + n * dst_row + h * dst_head;
        const float* x = src + n * src_row + h * src_head;
        for (int64_t j = 0; j < width; ++j) y[j] = x[j];
      });
}

// The rotary part's pair i: its two values' places in the projection's output.
struct RopePairs {
  int64_t half;
  bool interleave;
  KOKKOS_INLINE_FUNCTION int64_t a(int64_t i) const { return interleave ? 2 * i : i; }
  KOKKOS_INLINE_FUNCTION int64_t b(int64_t i) const { return interleave ? 2 * i + 1 : i + half; }
};

// YaRN's softmax scale beyond 1/√hs (mscale(factor, mscale_all_dim)², as DeepseekV3Attention
// scales its scores), folded into Q.
float query_scale(const GPTConfig& cfg) {
  if (!cfg.rope_yarn || cfg.yarn_mscale_all_dim == 0) return 1.0f;
  const double m = yarn_mscale(cfg.rope_factor, cfg.yarn_mscale_all_dim);
  return float(m * m);
}

}  // namespace

int64_t mla_activation_floats(const TpShard& s, int64_t R) {
  if (!s.cfg.mla()) return 0;
  Windows w(nullptr);
  mla_acts(w, MlaDims(s), R);
  return w.used();
}

int64_t mla_weight_input_floats(const TpShard& s, int64_t R) {
  if (!s.cfg.mla()) return 0;
  Windows w(nullptr);
  mla_grads(w, MlaDims(s), R);
  return w.used();
}

int64_t mla_backward_scratch_floats(const TpShard& s, int64_t R) {
  if (!s.cfg.mla()) return 0;
  Windows w(nullptr);
  mla_scratch(w, MlaDims(s), R);
  return w.used();
}

std::vector<float> mla_rope_frequencies(const GPTConfig& cfg) {
  if (cfg.rope_yarn) {
    YarnScaling y;
    y.factor = cfg.rope_factor;
    y.original_max_position = cfg.rope_original_max_pos;
    y.beta_fast = cfg.yarn_beta_fast;
    y.beta_slow = cfg.yarn_beta_slow;
    y.mscale = cfg.yarn_mscale;
    y.mscale_all_dim = cfg.yarn_mscale_all_dim;
    return yarn_inverse_frequencies(cfg.qk_rope_dim, cfg.rope_theta, y);
  }
  RopeScaling scaling;
  scaling.factor = cfg.rope_factor;
  scaling.low_freq_factor = cfg.rope_low_freq_factor;
  scaling.high_freq_factor = cfg.rope_high_freq_factor;
  scaling.original_max_position = cfg.rope_original_max_pos;
  return rope_inverse_frequencies(cfg.qk_rope_dim, cfg.rope_theta, scaling);
}

float mla_rope_table_scale(const GPTConfig& cfg) {
  if (!cfg.rope_yarn) return 1.0f;
  YarnScaling y;
  y.factor = cfg.rope_factor;
  y.mscale = cfg.yarn_mscale;
  y.mscale_all_dim = cfg.yarn_mscale_all_dim;
  return yarn_attention_factor(y);
}

void mla_forward(const LayerActivations& a, const LayerParameters& p, const TpShard& s, int64_t R,
                 Tensor cos, Tensor sin, int T, int pos0) {
  const MlaDims d(s);
  const MlaActs m = mla_acts(a.mla, d, R);
  const float eps = s.cfg.norm_eps;
  const Tensor none;
  if (d.qr > 0) {
    linear_forward(m.qa, none, a.ln1, p.qaw, none, R, int(d.C), int(d.qr));
    rmsnorm_forward(m.qan, m.qa_rstd, m.qa, p.qanw, R, int(d.qr), eps);
    linear_forward(m.q, none, m.qan, p.qbw, none, R, int(d.qr), int(d.q()));
  } else {
    linear_forward(m.q, none, a.ln1, p.qbw, none, R, int(d.C), int(d.q()));
  }
  linear_forward(m.kva, none, a.ln1, p.kvaw, none, R, int(d.C), int(d.kva()));
  copy_heads(m.lat.data(), d.kvr, 0, m.kva.data(), d.kva(), 0, R, 1, d.kvr);
  rmsnorm_forward(m.latn, m.lat_rstd, m.lat, p.kvanw, R, int(d.kvr), eps);
  linear_forward(m.kv, none, m.latn, p.kvbw, none, R, int(d.kvr), int(d.kv()));
  // Q, K and V of each head, rotated where they rotate.
  const int64_t H = d.H, hs = d.hs, dn = d.dn, dv = d.dv, kvr = d.kvr, Q = d.q(), KV = d.kv(),
                A = d.kva();
  const RopePairs pair{d.dr / 2, s.cfg.rope_interleave};
  const float sq = query_scale(s.cfg);
  const float *q = m.q.data(), *kv = m.kv.data(), *kva = m.kva.data();
  const float *cs = cos.data(), *sn = sin.data();
  float* qkv = a.qkv.data();
  for_each(
      "mpf::mla_pack", R * H, KOKKOS_LAMBDA(int64_t e) {
        const int64_t n = e / H, h = e % H, half = pair.half;
        const float* qs = q + n * Q + h * hs;
        const float* kvs = kv + n * KV + h * (dn + dv);
        const float* kr = kva + n * A + kvr;
        float* Qd = qkv + n * 3 * Q + h * hs;
        float* Kd = Qd + Q;
        float* Vd = Qd + 2 * Q;
        for (int64_t j = 0; j < dn; ++j) {
          Qd[j] = qs[j] * sq;
          Kd[j] = kvs[j];
        }
        for (int64_t j = 0; j < hs; ++j) Vd[j] = j < dv ? kvs[dn + j] : 0.0f;
        const int64_t at = int64_t(pos0 + n % T) * half;
        for (int64_t i = 0; i < half; ++i) {
          const float c = cs[at + i], sv = sn[at + i];
          const float qa = qs[dn + pair.a(i)], qb = qs[dn + pair.b(i)];
          Qd[dn + i] = (qa * c - qb * sv) * sq;
          Qd[dn + half + i] = (qb * c + qa * sv) * sq;
          const float ka = kr[pair.a(i)], kb = kr[pair.b(i)];
          Kd[dn + i] = ka * c - kb * sv;
          Kd[dn + half + i] = kb * c + ka * sv;
        }
      });
}

Tensor mla_latent(const LayerActivations& a, const TpShard& s, int64_t R) {
  return mla_acts(a.mla, MlaDims(s), R).latn;
}

Tensor mla_attention_output(const LayerActivations& a, const TpShard& s, int64_t R) {
  const MlaDims d(s);
  const MlaActs m = mla_acts(a.mla, d, R);
  copy_heads(m.o.data(), d.o(), d.dv, a.atty.data(), d.q(), d.hs, R, d.H, d.dv);
  return m.o;
}

Tensor mla_kept_attention_output(const LayerActivations& a, const TpShard& s, int64_t R) {
  return mla_acts(a.mla, MlaDims(s), R).o;
}

void mla_attention_output_backward(Tensor datty, Tensor scratch, Tensor dres2,
                                   const LayerParameters& p, const TpShard& s, int64_t R) {
  const MlaDims d(s);
  const MlaScratch b = mla_scratch(scratch, d, R);
  linear_backward_input(b.dout, dres2, p.attprojw, R, int(d.o()), int(d.C));
  Kokkos::deep_copy(ExecSpace(), Tensor(datty.data(), R * d.q()), 0.0f);
  copy_heads(datty.data(), d.q(), d.hs, b.dout.data(), d.o(), d.dv, R, d.H, d.dv);
}

void mla_backward_input(Tensor dln1, Tensor dmla, Tensor scratch, Tensor dqkv,
                        const LayerActivations& a, const LayerParameters& p, const TpShard& s,
                        int64_t R, Tensor cos, Tensor sin, int T) {
  const MlaDims d(s);
  const MlaActs m = mla_acts(a.mla, d, R);
  const MlaGrads g = mla_grads(dmla, d, R);
  const MlaScratch b = mla_scratch(scratch, d, R);
  const Tensor none;
  // The packing's transpose: dq, dkv, and the shared rotary key's gradient summed over this
  // rank's heads (in head order) into dkva's last qk_rope columns.
  const int64_t H = d.H, hs = d.hs, dn = d.dn, dv = d.dv, kvr = d.kvr, Q = d.q(), KV = d.kv(),
                A = d.kva();
  const RopePairs pair{d.dr / 2, s.cfg.rope_interleave};
  const float sq = query_scale(s.cfg);
  const float *dqkv_ = dqkv.data(), *cs = cos.data(), *sn = sin.data();
  float *dq = g.dq.data(), *dkv = g.dkv.data(), *dkva = g.dkva.data();
  for_each(
      "mpf::mla_unpack", R, KOKKOS_LAMBDA(int64_t n) {
        const int64_t half = pair.half, at = int64_t(n % T) * half;
        for (int64_t h = 0; h < H; ++h) {
          const float* dQ = dqkv_ + n * 3 * Q + h * hs;
          const float* dK = dQ + Q;
          const float* dV = dQ + 2 * Q;
          float* dqh = dq + n * Q + h * hs;
          float* dkvh = dkv + n * KV + h * (dn + dv);
          for (int64_t j = 0; j < dn; ++j) {
            dqh[j] = dQ[j] * sq;
            dkvh[j] = dK[j];
          }
          for (int64_t j = 0; j < dv; ++j) dkvh[dn + j] = dV[j];
          for (int64_t i = 0; i < half; ++i) {
            const float c = cs[at + i], sv = sn[at + i];
            const float g1 = dQ[dn + i] * sq, g2 = dQ[dn + half + i] * sq;
            dqh[dn + pair.a(i)] = g1 * c + g2 * sv;
            dqh[dn + pair.b(i)] = g2 * c - g1 * sv;
          }
        }
        float* dkr = dkva + n * A + kvr;
        for (int64_t i = 0; i < half; ++i) {
          const float c = cs[at + i], sv = sn[at + i];
          float ga = 0.0f, gb = 0.0f;
          for (int64_t h = 0; h < H; ++h) {
            const float* dK = dqkv_ + n * 3 * Q + Q + h * hs;
            const float g1 = dK[dn + i], g2 = dK[dn + half + i];
            ga += g1 * c + g2 * sv;
            gb += g2 * c - g1 * sv;
          }
          dkr[pair.a(i)] = ga;
          dkr[pair.b(i)] = gb;
        }
      });
  // The norms' weight gradients, while their outputs' gradients are at hand.
  Kokkos::deep_copy(ExecSpace(), g.dnormw, 0.0f);
  const Tensor dqanw(g.dnormw.data(), d.qr), dkvanw(g.dnormw.data() + d.qr, d.kvr);
  // The latent: kv_b's input gradient, through its norm, into dkva's first kv_lora_rank columns.
  linear_backward_input(b.dlatn, g.dkv, p.kvbw, R, int(d.kvr), int(d.kv()));
  rmsnorm_backward_weight(dkvanw, b.dlatn, m.lat, m.lat_rstd, R, int(d.kvr));
  rmsnorm_backward_input(b.dlat, none, b.dlatn, m.lat, m.lat_rstd, p.kvanw, R, int(d.kvr));
  copy_heads(g.dkva.data(), d.kva(), 0, b.dlat.data(), d.kvr, 0, R, 1, d.kvr);
  linear_backward_input(dln1, g.dkva, p.kvaw, R, int(d.C), int(d.kva()));
  if (d.qr > 0) {
    linear_backward_input(b.dqan, g.dq, p.qbw, R, int(d.qr), int(d.q()));
    rmsnorm_backward_weight(dqanw, b.dqan, m.qa, m.qa_rstd, R, int(d.qr));
    rmsnorm_backward_input(g.dqa, none, b.dqan, m.qa, m.qa_rstd, p.qanw, R, int(d.qr));
    linear_backward_input(b.dx, g.dqa, p.qaw, R, int(d.C), int(d.qr));
  } else {
    linear_backward_input(b.dx, g.dq, p.qbw, R, int(d.C), int(d.q()));
  }
  add_into(dln1, b.dx.data(), R * d.C);
}

void mla_backward_weight(const LayerParameters& g, Tensor dmla, const LayerActivations& a,
                         const TpShard& s, int64_t R, MPI_Comm tp, bool final_microbatch) {
  const MlaDims d(s);
  const MlaActs m = mla_acts(a.mla, d, R);
  const MlaGrads w = mla_grads(dmla, d, R);
  const Tensor none;
  // The block's input norm as the set keeps it: in bf16 under --precision bf16 (its fp32 staging
  // then holds another block's values), else in fp32.
  const auto from_ln1 = [&](Tensor grad, Tensor dout, int width) {
    if (a.ln1_bf16.extent(0) > 0) {
      linear_backward_weight(grad, none, dout, a.ln1_bf16, R, int(d.C), width);
    } else {
      linear_backward_weight(grad, none, dout, a.ln1, R, int(d.C), width);
    }
  };
  if (d.qr > 0) {
    from_ln1(g.qaw, w.dqa, int(d.qr));
    add_into(g.qanw, w.dnormw.data(), d.qr);
    linear_backward_weight(g.qbw, none, w.dq, m.qan, R, int(d.qr), int(d.q()));
  } else {
    from_ln1(g.qbw, w.dq, int(d.q()));
  }
  from_ln1(g.kvaw, w.dkva, int(d.kva()));
  add_into(g.kvanw, w.dnormw.data() + d.qr, d.kvr);
  linear_backward_weight(g.kvbw, none, w.dkv, m.latn, R, int(d.kvr), int(d.kv()));
  if (!final_microbatch) return;
  // Replicated, each rank's gradients come from its heads only: summed over the TP ranks.
  for (const Tensor* t : {&g.qaw, &g.qanw, &g.kvaw, &g.kvanw}) {
    if (t->extent(0) > 0) allreduce_sum(t->data(), int64_t(t->extent(0)), tp);
  }
}

}  // namespace mpf
