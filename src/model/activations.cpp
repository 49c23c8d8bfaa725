#include "model/activations.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "model/layers/ring_attention.hpp"
#include "model/layers/rope.hpp"
#include "model/mla_block.hpp"

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
  // n bf16 values in the floats' place: (n + 1) / 2 floats.
  Tensor16 take16(int64_t n) {
    // Empty: a null view (a set keeps its bf16 tensors or none of them; callers test extent).
    Tensor16 t(base_ && n > 0 ? reinterpret_cast<bf16*>(base_ + used_) : nullptr, base_ ? n : 0);
    used_ += (n + 1) / 2;
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
Tensor16 slice(const Tensor16& t, int64_t offset, int64_t n) {
  return Tensor16(t.data() + offset, n);
}

// int32 values stored in float slots of a slab (the same 4 bytes each).
int32_t* ints(const Tensor& t, int64_t offset) {
  static_assert(sizeof(int32_t) == sizeof(float), "an int32 in a float's slot");
  return t.data() ? reinterpret_cast<int32_t*>(t.data() + offset) : nullptr;
}

// A mixture of experts' sizes: E, k, this rank's (token, slot) pairs (R·k) and the rows its
// experts may receive (R·k from each EP rank: dropless, the worst case is every slot of the EP
// group on this rank's experts), all 0 for a dense MLP, whose fch rows are R.
struct MoeSizes {
  int64_t E = 0, k = 0, slots = 0, mlp_rows = 0, ep = 1;
  MoeSizes(const TpShard& s, int64_t R) {
    mlp_rows = R;
    if (!s.cfg.moe()) return;
    E = s.cfg.experts;
    k = s.cfg.experts_per_token;
    ep = s.ep_size;
    slots = R * k;
    mlp_rows = slots * ep;
  }
  int64_t ints() const { return E > 0 ? 3 * slots + E : 0; }  // choice, order, where, counts
  // The rows of the experts' inputs (moe_in): none for a dense MLP, which reads ln2 itself.
  int64_t expert_rows() const { return E > 0 ? mlp_rows : 0; }
  // The dispatch's buffers (the rows as sent and as received), without EP none.
  int64_t scratch_rows() const { return ep > 1 ? 2 * mlp_rows : 0; }
};

// A block's MLP activations: fch (its rows by the local rows of fcw) and GELU's or SwiGLU's
// output h (its rows by the local width). A mixed model's sets (GPTConfig::mixed) give every block
// the larger of a dense block's (R rows, its own width) and an experts' block's.
struct MlpFloats {
  int64_t fch = 0, h = 0;
  MlpFloats(const TpShard& s, int64_t R) {
    const MoeSizes moe(s, R);
    fch = moe.mlp_rows * s.mlp_in;
    h = moe.mlp_rows * s.fc;
    if (s.cfg.mixed()) {
      const TpShard dense = s.block_shard(0);
      fch = std::max<int64_t>(fch, R * dense.mlp_in);
      h = std::max<int64_t>(h, R * dense.fc);
    }
  }
};

// The one-op scratch of a set (ChunkPieces::shared_scratch): floats, but h in bf16 values.
// Selective recomputation's: norm (bf16 values with chunk.bf16, else floats) and h32 (floats).
struct ScratchSizes {
  int64_t partial = 0, staging = 0, h = 0, moe = 0, norm = 0, h32 = 0;
  int64_t output = 0;  // ChunkPieces::lent_output: the last block's output
};
ScratchSizes scratch_sizes(const Activations& a) {
  const TpShard& s = a.shard;
  const int64_t L = a.chunk.recompute ? 0 : a.chunk.layers, R = a.seq.rows, C = a.cfg.channels;
  const MoeSizes moe(s, R);
  ScratchSizes z;
  z.partial = a.seq.on ? R * C : 0;
  z.staging = L > 0 && a.chunk.bf16 ? R * bf16_staging_width(s) : 0;
  // GELU's or SwiGLU's output, and a shared expert's after the routed experts' (the same bytes).
  const int64_t shared_h = s.cfg.shared_expert() ? R * s.shared_fc : 0;
  const MlpFloats mlp(s, R);
  z.h = L > 0 && bf16_kept(a.cfg, a.chunk).fch ? std::max(mlp.h, shared_h) : 0;
  z.moe = L > 0 ? moe.scratch_rows() * C : 0;
  const SelectiveDrop drop = selective_dropped(a.cfg, a.chunk);
  z.norm = L > 0 && drop.ln1 ? R * C : 0;
  z.h32 = L > 0 && drop.h && !a.chunk.bf16 ? mlp.h : 0;
  z.output = a.chunk.lent_output && a.chunk.layers > 0 ? a.seq.local_rows * C : 0;
  return z;
}

void carve_scratch(Activations& a, SlabCarver& k) {
  const ScratchSizes z = scratch_sizes(a);
  a.partial = k.take(z.partial);
  a.staging = k.take(z.staging);
  a.h_scratch = k.take16(z.h);
  a.moe_scratch = k.take(z.moe);
  a.norm_scratch = k.take(a.chunk.bf16 ? 0 : z.norm);
  a.norm_scratch16 = k.take16(a.chunk.bf16 ? z.norm : 0);
  a.h_scratch32 = k.take(z.h32);
  a.lent_out = k.take(z.output);
}

void carve(Activations& a, SlabCarver& k) {
  const TpShard& s = a.shard;
  // Shared scratch: bound later (bind_scratch), none of it in the slab.
  const ScratchSizes z = scratch_sizes(a);
  const int64_t own = a.chunk.shared_scratch ? 0 : 1;
  // Under recomputation only residual3 (the block outputs) is kept for all L blocks.
  const int64_t B = a.B, T = a.T, C = a.cfg.channels, L = a.chunk.recompute ? 0 : a.chunk.layers;
  const int64_t R = a.seq.rows, Rl = a.seq.local_rows, H = a.chunk.head ? 1 : 0;
  const int64_t M = a.cfg.rms_norm() ? 0 : 1;                             // RMSNorm keeps no mean
  const int64_t rotated = a.cfg.mla() ? a.cfg.qk_rope_dim : s.head_size;  // MLA's rope part
  const int64_t rope = a.cfg.rope() ? T * rotated / 2 : 0;
  a.rope_cos = k.take(rope);
  a.rope_sin = k.take(rope);
  a.input = k.take(Rl * C);
  // output_grad is not in the slab: the pipeline stage lends one from its pool of receive
  // buffers from the receive until B (ModelStage::grad_buffer).
  a.partial = k.take(own * z.partial);
  const Bf16Kept b16 = bf16_kept(a.cfg, a.chunk);
  // Selective recomputation keeps none of these (one block's scratch instead).
  const SelectiveDrop drop = selective_dropped(a.cfg, a.chunk);
  const int64_t L1 = drop.ln1 ? 0 : L, L2 = drop.ln2 ? 0 : L, LH = drop.h ? 0 : L;
  a.staging = k.take(own * z.staging);
  a.norm_scratch = k.take(own * (a.chunk.bf16 ? 0 : z.norm));
  a.norm_scratch16 = k.take16(own * (a.chunk.bf16 ? z.norm : 0));
  a.h_scratch32 = k.take(own * z.h32);
  a.ln1 = k.take(b16.ln1 ? 0 : L1 * R * C);
  a.ln1_bf16 = k.take16(b16.ln1 ? L1 * R * C : 0);
  a.ln1_mean = k.take(M * L * Rl);
  a.ln1_rstd = k.take(L * Rl);
  a.qkv = k.take(b16.qkv ? 0 : L * R * s.qkv);
  a.qkv_bf16 = k.take16(b16.qkv ? L * R * s.qkv : 0);
  // The q/k norms keep Q's and K's raw values and their 1/rms.
  a.qk_raw = k.take(L * R * s.qk_norm_width());
  a.qk_rstd = k.take(L * R * s.qk_norm_stats());
  a.atty = k.take(b16.atty ? 0 : L * R * s.attn);
  a.atty_bf16 = k.take16(b16.atty ? L * R * s.attn : 0);
  a.lse = k.take(L * B * s.heads * T);
  const int64_t post = a.cfg.post_norm() ? 1 : 0;
  a.attn_out = k.take(post * L * Rl * C);
  a.residual2 = k.take(L * Rl * C);
  a.ln2 = k.take(b16.ln2 ? 0 : L2 * R * C);
  a.ln2_bf16 = k.take16(b16.ln2 ? L2 * R * C : 0);
  a.ln2_mean = k.take(M * L * Rl);
  a.ln2_rstd = k.take(L * Rl);
  const MoeSizes moe(s, R);
  const MlpFloats mlp(s, R);
  a.fch = k.take(b16.fch ? 0 : L * mlp.fch);
  a.fch_bf16 = k.take16(b16.fch ? L * mlp.fch : 0);
  a.fch_gelu = k.take(b16.fch_gelu ? 0 : LH * mlp.h);
  // With fch kept, GELU's or SwiGLU's output is one block's scratch (formed again in W).
  a.fch_gelu_bf16 = k.take16(b16.fch_gelu && !b16.fch ? L * mlp.h : 0);
  a.h_scratch = k.take16(own * z.h);
  a.mlp_out = k.take(post * L * Rl * C);
  a.router_probs = k.take(L * R * moe.E);
  a.gates = k.take(L * moe.slots);
  a.moe_stats = k.take(L * 2 * B * moe.E);
  a.moe_in = k.take(b16.moe_in ? 0 : L * moe.expert_rows() * C);
  a.moe_in_bf16 = k.take16(b16.moe_in ? L * moe.expert_rows() * C : 0);
  a.moe_out = k.take(b16.moe_out ? 0 : L * moe.slots * C);
  a.moe_out_bf16 = k.take16(b16.moe_out ? L * moe.slots * C : 0);
  a.moe_scratch = k.take(own * z.moe);
  const int64_t S = a.cfg.shared_expert() ? 1 : 0, S16 = b16.shared ? S : 0, S32 = S - S16;
  a.shared_fch = k.take(S32 * L * R * 2 * s.shared_fc);
  a.shared_fch_bf16 = k.take16(S16 * L * R * 2 * s.shared_fc);
  a.shared_h = k.take(S32 * L * R * s.shared_fc);
  a.shared_out = k.take(S32 * L * R * C);
  a.shared_out_bf16 = k.take16(S16 * L * R * C);
  a.shared_gate = k.take(S * L * R);
  a.mla = k.take(L * mla_activation_floats(s, R));
  a.moe_ints = k.take(L * moe.ints());
  // A lent output is the scratch's, not the set's.
  const int64_t lent = z.output > 0 ? 1 : 0;
  a.lent_out = k.take(own * z.output);
  a.residual3 = k.take((int64_t(a.chunk.layers) - lent) * Rl * C);
  const int64_t logit_rows = a.chunk.logit_rows > 0 ? std::min<int64_t>(a.chunk.logit_rows, R) : R;
  a.lnf = k.take(H * R * C);
  a.lnf_mean = k.take(M * H * Rl);
  a.lnf_rstd = k.take(H * Rl);
  // Under bf16 the logits are the head's product's bf16 output and their gradient overwrites
  // them in bf16, which both backward products read as it is (autocast's lm_head).
  const int64_t L16 = a.chunk.bf16 ? 1 : 0;
  a.logits = k.take((1 - L16) * H * logit_rows * s.vocab_shard);
  a.logits_bf16 = k.take16(L16 * H * logit_rows * s.vocab_shard);
  a.row_stats = k.take(H * 3 * logit_rows);
  a.losses = k.take(H * R);
}

void carve(BackwardBuffers& g, SlabCarver& k, const TpShard& s, const tp::SequenceSplit& seq,
           int64_t B, int64_t T) {
  const int64_t R = seq.rows, Rl = seq.local_rows, C = s.cfg.channels;
  const int64_t SP = seq.on ? 1 : 0;
  g.dresidual[0] = k.take(SP * Rl * C);
  g.dresidual[1] = k.take(SP * Rl * C);
  g.dresidual2 = k.take(SP * Rl * C);
  g.partial = k.take(SP * R * C);
  g.datty = k.take(R * s.attn);
  g.dmlp = k.take(s.cfg.swiglu() ? MlpFloats(s, R).h : 0);
  g.delta = k.take(B * s.heads * T);
  g.qk_sums = k.take(s.cfg.qk_norm_kind() == QkNorm::kWhole ? 2 * R : 0);
  const MoeSizes moe(s, R);
  g.moe_dout = k.take(moe.E > 0 ? R * C : 0);
  g.moe_dy = k.take(moe.slots * C);
  g.dgates = k.take(moe.slots);
  g.dshared_h = k.take(s.cfg.shared_expert() ? R * s.shared_fc : 0);
  g.mla = k.take(mla_backward_scratch_floats(s, R));
  g.dqkv = k.take(s.cfg.mla() ? R * s.qkv : 0);
}

void carve(WeightGradInputs& w, SlabCarver& k) {
  const TpShard& s = w.shard;
  const int64_t R = w.seq.rows, Rl = w.seq.local_rows, C = s.cfg.channels, L = w.chunk.layers;
  const int64_t K = w.chunk.recompute ? L : 0;  // blocks whose activations W must keep itself
  const int64_t M = s.cfg.rms_norm() ? 0 : 1;   // RMSNorm keeps no mean
  const MoeSizes moe(s, R);
  w.dout = k.take(L * std::max(R, moe.mlp_rows) * C);
  const MlpFloats mlp(s, R);
  w.dfch = k.take(L * mlp.fch);
  w.drouter = k.take(L * R * moe.E);
  const int64_t S = s.cfg.shared_expert() ? 1 : 0;
  w.shared_dout = k.take(S * L * R * C);
  w.shared_dfch = k.take(S * L * R * 2 * s.shared_fc);
  w.shared_dgate = k.take(S * L * R);
  const int64_t S16 = bf16_kept(s.cfg, w.chunk).shared ? S : 0;
  w.shared_h = k.take((S - S16) * K * R * s.shared_fc);
  w.shared_h_bf16 = k.take16(S16 * K * R * s.shared_fc);
  w.mla = k.take(K * mla_activation_floats(s, R));
  w.dmla = k.take(L * mla_weight_input_floats(s, R));
  w.dln2 = k.take(L * Rl * C);
  w.dres2 = k.take(L * R * C);
  w.dqkv = k.take(s.cfg.mla() ? 0 : L * R * s.qkv);  // latent attention's: B's scratch
  w.dln1 = k.take(L * Rl * C);
  w.dqk_normw = k.take(L * s.qk_norm_weight_grad());
  const Bf16Kept b16 = bf16_kept(s.cfg, w.chunk);
  w.ln1 = k.take(b16.ln1 ? 0 : K * R * C);
  w.ln1_bf16 = k.take16(b16.ln1 ? K * R * C : 0);
  w.ln1_mean = k.take(M * K * Rl);
  w.ln1_rstd = k.take(K * Rl);
  const int64_t post = s.cfg.post_norm() ? 1 : 0;
  w.atty = k.take(b16.atty ? 0 : K * R * s.attn);
  w.atty_bf16 = k.take16(b16.atty ? K * R * s.attn : 0);
  w.attn_out = k.take(post * K * Rl * C);
  w.residual2 = k.take(K * Rl * C);
  w.ln2 = k.take(b16.ln2 ? 0 : K * R * C);
  w.ln2_bf16 = k.take16(b16.ln2 ? K * R * C : 0);
  w.ln2_mean = k.take(M * K * Rl);
  w.ln2_rstd = k.take(K * Rl);
  w.fch_gelu = k.take(b16.fch_gelu ? 0 : K * mlp.h);
  w.fch_gelu_bf16 = k.take16(b16.fch_gelu ? K * mlp.h : 0);
  w.mlp_out = k.take(post * K * Rl * C);
  w.moe_in = k.take(b16.moe_in ? 0 : K * moe.expert_rows() * C);
  w.moe_in_bf16 = k.take16(b16.moe_in ? K * moe.expert_rows() * C : 0);
  w.dlnf = k.take(w.chunk.head ? Rl * C : 0);
  w.dembed = k.take(w.chunk.embedding ? R * C : 0);
}

tp::SequenceSplit split_rows(const TpShard& s, int B, int T, bool on) {
  tp::SequenceSplit seq;
  seq.on = on && s.size > 1;
  seq.rows = int64_t(B) * T;
  seq.local_rows = seq.on ? seq.rows / s.size : seq.rows;
  seq.row_begin = seq.on ? s.rank * seq.local_rows : 0;
  return seq;
}

// The shapes of a set, before any memory is bound.
Activations describe(const TpShard& shard, const ChunkPieces& chunk, int B, int T, bool sp) {
  Activations a;
  a.cfg = shard.cfg;
  a.shard = shard;
  a.chunk = chunk;
  a.seq = split_rows(shard, B, T, sp);
  a.seq.bf16 = chunk.tp_bf16 && shard.size > 1;
  a.B = B;
  a.T = T;
  a.positions = PositionRuns::contiguous(T);
  return a;
}

// Floats a set's tensors take: carve() once without memory.
template <class Set>
int64_t floats_of(Set& x) {
  SlabCarver counter(nullptr);
  carve(x, counter);
  return counter.used();
}

// Gives a described set its one slab and binds its tensors to it.
template <class Set>
void bind_slab(Set& x, const char* label) {
  x.slab = Slab(std::string(label), floats_of(x));
  SlabCarver binder(x.slab.data());
  carve(x, binder);
}
}  // namespace

Bf16Kept bf16_kept(const GPTConfig& cfg, const ChunkPieces& chunk) {
  Bf16Kept k;
  k.ln1 = k.qkv = k.atty = chunk.bf16;
  k.ln2 = chunk.bf16 && !cfg.moe();
  k.fch_gelu = k.fch = chunk.bf16;
  k.moe_in = k.moe_out = chunk.bf16 && cfg.moe();
  k.shared = chunk.bf16 && cfg.shared_expert();
  return k;
}

SelectiveDrop selective_dropped(const GPTConfig& cfg, const ChunkPieces& chunk) {
  SelectiveDrop d;
  d.ln1 = chunk.selective && !chunk.recompute;
  d.ln2 = d.h = d.ln1 && !cfg.moe();
  return d;
}

int64_t bf16_staging_width(const TpShard& shard) {
  return std::max<int64_t>(shard.cfg.channels, int64_t(shard.qkv) + shard.attn);
}

int head_chunk_rows(const TpShard& shard, const ChunkPieces& chunk, int B, int T,
                    bool sequence_parallel) {
  constexpr int64_t kMostLogits = int64_t(1) << 26;  // floats: 256 MB
  constexpr int kPiece = 2048;
  if (!chunk.head) return 0;
  const int64_t R = int64_t(B) * T, Vl = shard.vocab_shard;
  ChunkPieces blocks = chunk;
  blocks.head = false;
  blocks.logit_rows = 0;
  const int64_t kept_per_row =
      Activations::bytes(shard, blocks, B, T, sequence_parallel) / int64_t(sizeof(float)) / R;
  return R * Vl > kMostLogits && Vl > kept_per_row && R > kPiece ? kPiece : 0;
}

ChunkPieces whole_stage(const TpShard& shard) {
  // The multi-token prediction modules' blocks (with the head) are not the chunk's: model/mtp.hpp
  // runs them.
  const int modules = shard.has_head ? shard.cfg.mtp : 0;
  return {0, shard.local_layers() - modules, shard.has_embedding, shard.has_head};
}

Activations Activations::allocate(const GPTConfig& cfg, int B, int T) {
  return allocate(make_tp_shard(cfg, 0, 1), B, T);
}

Activations Activations::allocate(const TpShard& shard, int B, int T, bool sequence_parallel) {
  return allocate(shard, whole_stage(shard), B, T, sequence_parallel);
}

Activations Activations::allocate(const TpShard& shard, const ChunkPieces& chunk, int B, int T,
                                  bool sequence_parallel, const PositionRuns* positions) {
  Activations a = describe(shard, chunk, B, T, sequence_parallel);
  if (positions) a.positions = *positions;
  bind_slab(a, "mpf::activations");
  if (a.cfg.moe() && !chunk.recompute) {
    a.moe_host_counts = Kokkos::View<int64_t*, HostSpace>(
        "mpf::moe_host_counts", int64_t(chunk.layers) * 2 * a.cfg.experts);
  }
  if (a.cfg.rope()) {
    const GPTConfig& c = a.cfg;
    RopeScaling scaling;
    scaling.factor = c.rope_factor;
    scaling.low_freq_factor = c.rope_low_freq_factor;
    scaling.high_freq_factor = c.rope_high_freq_factor;
    scaling.original_max_position = c.rope_original_max_pos;
    if (c.mla()) {
      rope_tables(a.rope_cos, a.rope_sin, mla_rope_frequencies(c), a.positions,
                  mla_rope_table_scale(c));
    } else {
      rope_tables(a.rope_cos, a.rope_sin,
                  rope_inverse_frequencies(c.head_size(), c.rope_theta, scaling), a.positions);
    }
  }
  return a;
}

int64_t Activations::bytes(const TpShard& shard, const ChunkPieces& chunk, int B, int T,
                           bool sequence_parallel) {
  Activations a = describe(shard, chunk, B, T, sequence_parallel);
  return floats_of(a) * int64_t(sizeof(float));
}

int64_t Activations::scratch_bytes(const TpShard& shard, const ChunkPieces& chunk, int B, int T,
                                   bool sequence_parallel) {
  Activations a = describe(shard, chunk, B, T, sequence_parallel);
  SlabCarver counter(nullptr);
  carve_scratch(a, counter);
  return counter.used() * int64_t(sizeof(float));
}

void Activations::bind_scratch(float* base) {
  SlabCarver binder(base);
  carve_scratch(*this, binder);
}

LayerActivations Activations::layer(int l) const {
  const int64_t C = cfg.channels, R = seq.rows, Rl = seq.local_rows;
  const int64_t bht = int64_t(B) * shard.heads * T;
  const int64_t M = cfg.rms_norm() ? 0 : 1;
  LayerActivations x;
  if (chunk.recompute) {  // a store of block outputs only: the rest stay empty views
    const bool lent = chunk.lent_output && l == chunk.layers - 1;
    x.residual3 = lent ? lent_out : slice(residual3, l * Rl * C, Rl * C);
    return x;
  }
  const SelectiveDrop drop = selective_dropped(cfg, chunk);
  // A norm's output: kept (fp32, or bf16 formed in the staging), or selective's one-block scratch.
  auto norm_output = [&](bool dropped, const Tensor& kept, const Tensor16& kept16, Tensor& out,
                         Tensor16& out16) {
    if (chunk.bf16) {
      out = staging;
      out16 = dropped ? norm_scratch16 : slice(kept16, l * R * C, R * C);
    } else {
      out = dropped ? norm_scratch : slice(kept, l * R * C, R * C);
    }
  };
  norm_output(drop.ln1, ln1, ln1_bf16, x.ln1, x.ln1_bf16);
  x.recompute_ln1 = drop.ln1;
  x.ln1_mean = slice(ln1_mean, l * Rl * M, Rl * M);
  x.ln1_rstd = slice(ln1_rstd, l * Rl, Rl);
  x.staging = staging;
  // Kept in bf16: [Q | K | V] and the attention's output side by side in the staging.
  const int64_t NQ = qkv_bf16.extent(0) > 0 ? R * shard.qkv : 0;
  const int64_t NA = atty_bf16.extent(0) > 0 ? R * shard.attn : 0;
  x.qkv = NQ > 0 ? Tensor(staging.data(), NQ) : slice(qkv, l * R * shard.qkv, R * shard.qkv);
  x.qkv_bf16 = slice(qkv_bf16, l * NQ, NQ);
  const int64_t qk = shard.qk_norm_width(), stats = shard.qk_norm_stats();
  x.qk_raw = slice(qk_raw, l * R * qk, R * qk);
  x.qk_rstd = slice(qk_rstd, l * R * stats, R * stats);
  x.atty = NA > 0 ? Tensor(staging.data() + R * shard.qkv, NA)
                  : slice(atty, l * R * shard.attn, R * shard.attn);
  x.atty_bf16 = slice(atty_bf16, l * NA, NA);
  x.lse = slice(lse, l * bht, bht);
  const int64_t P = cfg.post_norm() ? Rl * C : 0;
  x.attn_out = slice(attn_out, l * P, P);
  x.residual2 = slice(residual2, l * Rl * C, Rl * C);
  if (bf16_kept(cfg, chunk).ln2 || !chunk.bf16) {
    norm_output(drop.ln2, ln2, ln2_bf16, x.ln2, x.ln2_bf16);
  } else {  // a mixture of experts' ln2 stays fp32 under bf16
    x.ln2 = slice(ln2, l * R * C, R * C);
  }
  x.recompute_ln2 = drop.ln2;
  x.ln2_mean = slice(ln2_mean, l * Rl * M, Rl * M);
  x.ln2_rstd = slice(ln2_rstd, l * Rl, Rl);
  const MoeSizes moe(shard, R);
  const MlpFloats mlp(shard, R);
  const int64_t NF = fch_bf16.extent(0) > 0 ? mlp.fch : 0;
  x.fch = slice(fch, l * (mlp.fch - NF), mlp.fch - NF);
  x.fch_bf16 = slice(fch_bf16, l * NF, NF);
  const int64_t G = fch_gelu.extent(0) > 0 ? mlp.h : 0;
  x.fch_gelu = slice(fch_gelu, l * G, G);
  if (h_scratch32.extent(0) > 0) {
    x.fch_gelu = h_scratch32;
    x.recompute_h = true;
  }
  if (fch_gelu_bf16.extent(0) > 0) {
    x.fch_gelu_bf16 = slice(fch_gelu_bf16, l * mlp.h, mlp.h);
  } else if (h_scratch.extent(0) > 0) {
    x.fch_gelu_bf16 = h_scratch;
    x.recompute_h = true;
  }
  x.mlp_out = slice(mlp_out, l * P, P);
  x.router_probs = slice(router_probs, l * R * moe.E, R * moe.E);
  x.gates = slice(gates, l * moe.slots, moe.slots);
  x.moe_stats = slice(moe_stats, l * 2 * B * moe.E, 2 * B * moe.E);
  const int64_t NI = moe_in_bf16.extent(0) > 0 ? moe.expert_rows() * C : 0;
  x.moe_in = slice(moe_in, l * (moe.expert_rows() * C - NI), moe.expert_rows() * C - NI);
  x.moe_in_bf16 = slice(moe_in_bf16, l * NI, NI);
  const int64_t NO = moe_out_bf16.extent(0) > 0 ? moe.slots * C : 0;
  x.moe_out = slice(moe_out, l * (moe.slots * C - NO), moe.slots * C - NO);
  x.moe_out_bf16 = slice(moe_out_bf16, l * NO, NO);
  x.moe_scratch = moe_scratch;
  const int64_t S = cfg.shared_expert() ? R : 0, Fs = shard.shared_fc;
  const int64_t S16 = shared_out_bf16.extent(0) > 0 ? S : 0, S32 = S - S16;
  x.shared_fch = slice(shared_fch, l * S32 * 2 * Fs, S32 * 2 * Fs);
  x.shared_fch_bf16 = slice(shared_fch_bf16, l * S16 * 2 * Fs, S16 * 2 * Fs);
  x.shared_h = slice(shared_h, l * S32 * Fs, S32 * Fs);
  if (shared_h_bf16.extent(0) > 0) {  // a recomputation's site: the W inputs' kept copy
    x.shared_h_bf16 = slice(shared_h_bf16, l * S16 * Fs, S16 * Fs);
  } else if (S16 > 0) {  // one block's scratch, as the routed experts' (formed again in W)
    x.shared_h_bf16 = Tensor16(h_scratch.data(), S16 * Fs);
  }
  x.shared_out = slice(shared_out, l * S32 * C, S32 * C);
  x.shared_out_bf16 = slice(shared_out_bf16, l * S16 * C, S16 * C);
  x.shared_gate = slice(shared_gate, l * S, S);
  const int64_t NM = mla_activation_floats(shard, R);
  x.mla = slice(mla, l * NM, NM);
  if (moe.E > 0) {
    const int64_t base = l * moe.ints();
    x.moe.choice = ints(moe_ints, base);
    x.moe.order = ints(moe_ints, base + moe.slots);
    x.moe.where = ints(moe_ints, base + 2 * moe.slots);
    x.moe.counts = ints(moe_ints, base + 3 * moe.slots);
    if (moe_host_counts.data()) {
      x.moe.host_counts = moe_host_counts.data() + l * 2 * moe.E;
      x.moe.host_received = x.moe.host_counts + moe.E;
    }
  }
  x.moe.seqs = B;
  x.moe.seq_len = int64_t(T) * (ring ? ring->ranks() : 1);
  x.moe.cp = ring ? ring->comm() : MPI_COMM_NULL;
  x.moe.ep = groups.ep;
  x.moe.aux = moe_aux;
  x.moe.load = moe_aux && moe_load ? moe_load + (chunk.first_layer + l) * moe.E : nullptr;
  x.moe.adds_aux = shard.rank == 0 && (!ring || ring->rank() == 0);
  x.moe.dloss = dloss;
  const bool lent = chunk.lent_output && l == chunk.layers - 1;
  x.residual3 = lent ? lent_out : slice(residual3, l * Rl * C, Rl * C);
  return x;
}

Tensor Activations::block_input(int i) const {
  return i == 0 ? input : layer(i - 1).residual3;
}

Tensor Activations::output() const {
  return chunk.layers == 0 ? input : layer(chunk.layers - 1).residual3;
}

BackwardBuffers BackwardBuffers::allocate(const GPTConfig& cfg, int B, int T) {
  return allocate(make_tp_shard(cfg, 0, 1), B, T);
}

int64_t BackwardBuffers::bytes(const TpShard& shard, int B, int T, bool sequence_parallel) {
  BackwardBuffers g;
  SlabCarver counter(nullptr);
  carve(g, counter, shard, split_rows(shard, B, T, sequence_parallel), B, T);
  return counter.used() * int64_t(sizeof(float));
}

BackwardBuffers BackwardBuffers::allocate(const TpShard& shard, int B, int T,
                                          bool sequence_parallel) {
  BackwardBuffers g;
  const tp::SequenceSplit seq = split_rows(shard, B, T, sequence_parallel);
  SlabCarver counter(nullptr);
  carve(g, counter, shard, seq, B, T);
  g.slab = Slab("mpf::backward_buffers", counter.used());
  SlabCarver binder(g.slab.data());
  carve(g, binder, shard, seq, B, T);
  return g;
}

namespace {
WeightGradInputs describe_weight_inputs(const TpShard& shard, const ChunkPieces& chunk, int B,
                                        int T, bool sp) {
  WeightGradInputs w;
  w.chunk = chunk;
  w.seq = split_rows(shard, B, T, sp);
  w.shard = shard;
  w.B = B;
  w.T = T;
  return w;
}
}  // namespace

WeightGradInputs WeightGradInputs::allocate(const TpShard& shard, const ChunkPieces& chunk, int B,
                                            int T, bool sequence_parallel) {
  WeightGradInputs w = describe_weight_inputs(shard, chunk, B, T, sequence_parallel);
  bind_slab(w, "mpf::weight_grad_inputs");
  if (shard.cfg.moe()) {
    w.counts = Kokkos::View<int64_t*, HostSpace>("mpf::moe_kept_counts",
                                                 int64_t(chunk.layers) * shard.cfg.experts);
  }
  return w;
}

WeightGradInputs WeightGradInputs::allocate(const GPTConfig& cfg, int B, int T) {
  const TpShard shard = make_tp_shard(cfg, 0, 1);
  return allocate(shard, whole_stage(shard), B, T);
}

int64_t WeightGradInputs::bytes(const TpShard& shard, const ChunkPieces& chunk, int B, int T,
                                bool sequence_parallel) {
  WeightGradInputs w = describe_weight_inputs(shard, chunk, B, T, sequence_parallel);
  return floats_of(w) * int64_t(sizeof(float));
}

BlockWeightInputs WeightGradInputs::block(int i) const {
  const int64_t C = shard.cfg.channels, R = seq.rows, Rl = seq.local_rows;
  const int64_t M = shard.cfg.rms_norm() ? 0 : 1;
  BlockWeightInputs x;
  const MoeSizes moe(shard, R);
  const int64_t out_rows = std::max(R, moe.mlp_rows);
  x.dout = slice(dout, i * out_rows * C, out_rows * C);
  const MlpFloats mlp(shard, R);
  x.dfch = slice(dfch, i * mlp.fch, mlp.fch);
  x.drouter = slice(drouter, i * R * moe.E, R * moe.E);
  x.counts = counts.data() ? counts.data() + i * moe.E : nullptr;
  x.dln2 = slice(dln2, i * Rl * C, Rl * C);
  x.dres2 = slice(dres2, i * R * C, R * C);
  const int64_t NQKV = shard.cfg.mla() ? 0 : R * shard.qkv;
  x.dqkv = slice(dqkv, i * NQKV, NQKV);
  x.dln1 = slice(dln1, i * Rl * C, Rl * C);
  const int64_t nw = shard.qk_norm_weight_grad();
  x.dqk_normw = slice(dqk_normw, i * nw, nw);
  const int64_t S = shard.cfg.shared_expert() ? R : 0, Fs = shard.shared_fc;
  x.shared_dout = slice(shared_dout, i * S * C, S * C);
  x.shared_dfch = slice(shared_dfch, i * S * 2 * Fs, S * 2 * Fs);
  x.shared_dgate = slice(shared_dgate, i * S, S);
  const int64_t NM = mla_weight_input_floats(shard, R);
  x.dmla = slice(dmla, i * NM, NM);
  if (!chunk.recompute) return x;
  LayerActivations& k = x.kept;
  const int64_t N1 = ln1_bf16.extent(0) > 0 ? 0 : R * C, N2 = ln2_bf16.extent(0) > 0 ? 0 : R * C;
  const int64_t NG = fch_gelu_bf16.extent(0) > 0 ? 0 : mlp.h;
  k.ln1 = slice(ln1, i * N1, N1);
  k.ln1_bf16 = slice(ln1_bf16, i * (R * C - N1), R * C - N1);
  k.ln1_mean = slice(ln1_mean, i * Rl * M, Rl * M);
  k.ln1_rstd = slice(ln1_rstd, i * Rl, Rl);
  const int64_t P = shard.cfg.post_norm() ? Rl * C : 0;
  const int64_t NA = atty_bf16.extent(0) > 0 ? R * shard.attn : 0;
  k.atty = slice(atty, i * (R * shard.attn - NA), R * shard.attn - NA);
  k.atty_bf16 = slice(atty_bf16, i * NA, NA);
  k.attn_out = slice(attn_out, i * P, P);
  k.residual2 = slice(residual2, i * Rl * C, Rl * C);
  k.ln2 = slice(ln2, i * N2, N2);
  k.ln2_bf16 = slice(ln2_bf16, i * (R * C - N2), R * C - N2);
  k.ln2_mean = slice(ln2_mean, i * Rl * M, Rl * M);
  k.ln2_rstd = slice(ln2_rstd, i * Rl, Rl);
  k.fch_gelu = slice(fch_gelu, i * NG, NG);
  k.fch_gelu_bf16 = slice(fch_gelu_bf16, i * (mlp.h - NG), mlp.h - NG);
  k.mlp_out = slice(mlp_out, i * P, P);
  const int64_t NI = moe_in_bf16.extent(0) > 0 ? moe.expert_rows() * C : 0;
  k.moe_in = slice(moe_in, i * (moe.expert_rows() * C - NI), moe.expert_rows() * C - NI);
  k.moe_in_bf16 = slice(moe_in_bf16, i * NI, NI);
  const int64_t SH = shared_h_bf16.extent(0) > 0 ? S * Fs : 0;
  k.shared_h = slice(shared_h, i * (S * Fs - SH), S * Fs - SH);
  k.shared_h_bf16 = slice(shared_h_bf16, i * SH, SH);
  const int64_t KM = mla_activation_floats(shard, R);
  k.mla = slice(mla, i * KM, KM);
  return x;
}

}  // namespace mpf
