#include "plan/cost_model.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <set>

#include "layout/layout_memory.hpp"
#include "layout/step_log.hpp"
#include "model/activations.hpp"
#include "model/parameters.hpp"
#include "model/shard.hpp"
#include "model/tensors.hpp"
#include "optim/muon.hpp"
#include "pipeline/layer_ownership.hpp"
#include "pipeline/simulator.hpp"
#include "plan/comm_model.hpp"

namespace mpf::plan {

namespace {

constexpr double kFloat = 4.0;
// Kernel launches per block, besides its products (norms, residuals, rotary, activation,
// attention's pieces); the backward launches about twice as many.
constexpr double kKernelsPerBlock = 14.0;

// y at x on a curve of points, linear in log x between them, flat beyond its ends.
template <class P, class X, class Y>
double on_curve(const std::vector<P>& pts, double x, X xof, Y yof) {
  if (x <= xof(pts.front())) return yof(pts.front());
  if (x >= xof(pts.back())) return yof(pts.back());
  for (size_t i = 1; i < pts.size(); ++i) {
    if (x > xof(pts[i])) continue;
    const double a = std::log(xof(pts[i - 1])), b = std::log(xof(pts[i]));
    const double t = (std::log(x) - a) / (b - a);
    return yof(pts[i - 1]) + t * (yof(pts[i]) - yof(pts[i - 1]));
  }
  return yof(pts.back());
}

// The sizes a rank's layout gives the shared memory-shape builder.
LayoutSizes sizes_of(const Job& job, const Machine& m, const Layout& l) {
  LayoutSizes s;
  s.cfg = job.cfg;
  s.tp = l.tp, s.cp = l.cp, s.pp = l.pp, s.ep = l.ep;
  s.dp_cp = l.dp * l.cp;
  s.micro_batch = l.micro_batch_size(job);
  s.seq_len = job.seq_len;
  s.layer_ranges = distribute_layers(job.cfg.layers, l.pp * l.virtual_stages);
  s.sequence_parallel = l.sequence_parallel;
  s.recompute = l.recompute;
  s.selective = l.selective;
  s.zero = l.zero > 0;
  s.zero_stage = std::max(1, l.zero);
  s.zero_ranks = l.zero_node ? zero_node_ranks(job, l) : 0;
  s.bf16 = job.precision == Precision::bf16;
  s.p2p_bf16 = job.p2p_bf16;
  s.reduce_bf16 = job.reduce_bf16;
  s.tp_bf16 = job.tp_bf16;
  s.muon = job.muon;
  s.threads = m.gpu() ? 1 : std::max(1, int(devices_per_rank(m, job)));
  return s;
}

// Bytes of an element of the TP collectives' activations and gradients (--tp-comm-dtype).
double tp_element(const Job& job) {
  return job.tp_bf16 ? 2.0 : kFloat;
}

// A TP sum of the activations or their gradients, at --tp-comm-dtype's element: on a GPU a bf16
// sum runs on host copies (parallel/device_mpi.cpp's sum_on_host), not over NVLink.
double tp_allreduce_ms(const Job& job, const Machine& m, double bytes, Group g) {
  return job.tp_bf16 && m.gpu() ? host_allreduce_ms(m, bytes, g) : allreduce_ms(m, bytes, g);
}
double tp_reduce_scatter_ms(const Job& job, const Machine& m, double bytes, Group g) {
  return job.tp_bf16 && m.gpu() ? host_reduce_scatter_ms(m, bytes, g)
                                : reduce_scatter_ms(m, bytes, g);
}

// One block's costs per microbatch: F, B and W.
struct BlockWork {
  OpTime f, b, w;
};

BlockWork block_work(const Job& job, const Machine& m, const Layout& l, const TpShard& s,
                     double dev) {
  const GPTConfig& cfg = job.cfg;
  const Precision p = job.precision;
  const double R = double(l.micro_batch_size(job)) * (job.seq_len / l.cp);
  const double Rn = l.sequence_parallel ? R / l.tp : R;
  const double C = cfg.channels, bw = m.memory_bandwidth_gbs * 1e6 * dev;  // bytes per ms
  auto gemm = [&](double rows, double n, double k) { return gemm_ms(m, p, 2 * rows * n * k, dev); };
  BlockWork out;
  // Products: F computes each once, B (input gradients) and W (weight gradients) once more each.
  double products = gemm(R, s.qkv, C) + gemm(R, C, s.attn);
  double elementwise = 10 * C * Rn + 2.0 * s.qkv * R + (l.sequence_parallel ? 2 * C * R : 0);
  if (cfg.moe()) {
    const double k = cfg.experts_per_token, E = cfg.experts;
    const double rows = R * k * l.ep / E;  // per local expert, balanced
    products += gemm(R, E, C) + (E / l.ep) * (gemm(rows, s.mlp_in, C) + gemm(rows, C, s.fc));
    elementwise += R * k * (3 * C + s.mlp_in + s.fc) + 4 * R * E;
    if (cfg.shared_expert()) {
      products += gemm(R, 2.0 * s.shared_fc, C) + gemm(R, C, s.shared_fc);
      elementwise += R * 3.0 * s.shared_fc;
    }
  } else {
    products += gemm(R, s.mlp_in, C) + gemm(R, C, s.fc);
    elementwise += R * double(s.mlp_in + s.fc);
  }
  // Attention over the keys a query sees: T/2 causally, a window's share with one.
  const double T = job.seq_len, W = cfg.sliding_window;
  const double keys = W > 0 && W < T ? W - W * W / (2 * T) : T / 2;
  const double attn_flops = 4.0 * R * keys * s.head_size * s.heads;
  const int attn_len = job.seq_len / l.cp;
  const double attn_f = attention_ms(m, p, attn_flops, attn_len, false, dev);
  const double attn_b = attention_ms(m, p, 2 * attn_flops, attn_len, true, dev);
  const double launch = kKernelsPerBlock * m.kernel_overhead_us / 1e3;
  out.f.compute = products + attn_f + elementwise * kFloat / bw + launch;
  out.b.compute = products + attn_b + 2 * elementwise * kFloat / bw + 2 * launch;
  out.w.compute = products;
  // --precision bf16 keeps ln1, Q/K/V, the attention's output and a dense MLP's ln2 and fc output
  // in bf16 (model/activations.hpp's bf16_kept): each is formed in fp32 and rounded into its copy
  // in a pass of its own (4 bytes read and 2 written an element; Q/K/V rounded in place as well,
  // 10), GELU or SwiGLU then reads and writes bf16 (2 bytes an element, not 4), and B widens Q/K/V
  // and the output back into fp32 (2 read, 4 written). The residual stream stays fp32.
  if (p == Precision::bf16) {
    double kept = R * (6.0 * C + 10.0 * s.qkv + 6.0 * s.attn);
    if (!cfg.moe()) kept += R * (6.0 * C + 6.0 * s.mlp_in - 2.0 * double(s.mlp_in + s.fc));
    out.f.compute += kept / bw;
    out.b.compute += R * 6.0 * (s.qkv + s.attn) / bw;
  }
  // TP: two entries and two exits per block each way (all-reduces, or all-gathers and
  // reduce-scatters with sequence parallelism: the same traffic).
  const Group tp{l.tp, 1};
  const double act = R * C * tp_element(job);
  out.f.tp = l.sequence_parallel
                 ? 2 * (allgather_ms(m, act, tp) + tp_reduce_scatter_ms(job, m, act, tp))
                 : 2 * tp_allreduce_ms(job, m, act, tp);
  out.b.tp = out.f.tp;
  // CP: the ring's K/V blocks (and backward their gradients' accumulators too), each step in
  // flight while the previous block is attended over.
  if (l.cp > 1) {
    const bool across = group_nodes(job, l, "cp") > 1;
    const double kv = R * 2.0 * s.kv * kFloat;
    const double ring_f = (l.cp - 1) * p2p_ms(m, kv, across);
    const double ring_b = (l.cp - 1) * p2p_ms(m, 2 * kv, across);
    const double hidden = double(l.cp - 1) / l.cp;
    out.f.cp = std::max(0.0, ring_f - hidden * attn_f);
    out.b.cp = std::max(0.0, ring_b - hidden * attn_b);
  }
  // EP: the counts, the rows out and their outputs back, each way.
  if (l.ep > 1 && cfg.moe()) {  // (not a mixed model's dense block)
    const Group ep{l.ep, group_nodes(job, l, "ep")};
    const double rows = R * cfg.experts_per_token * C * kFloat;
    out.f.ep = alltoall_ms(m, cfg.experts * 4.0 * l.ep, ep) + 2 * alltoall_ms(m, rows, ep);
    out.b.ep = out.f.ep;
  }
  if (l.selective) {  // W forms the norms' outputs (gathered again under SP) and GELU's again
    const double norms = cfg.moe() ? 1 : 2;
    const double again = norms * C * (Rn + R) + (cfg.moe() ? 0 : R * double(s.mlp_in + s.fc));
    out.w.compute += again * kFloat / bw;
    if (l.sequence_parallel) out.w.tp += norms * allgather_ms(m, act, tp);
  }
  if (l.recompute) {  // the block's forward again before its backward
    out.b.compute += out.f.compute;
    out.b.tp += out.f.tp;
    out.b.cp += out.f.cp;
    out.b.ep += out.f.ep;
  }
  return out;
}

void add(OpTime& a, const OpTime& b, double times = 1) {
  a.compute += times * b.compute;
  a.tp += times * b.tp;
  a.cp += times * b.cp;
  a.ep += times * b.ep;
}

}  // namespace

double devices_per_rank(const Machine& m, const Job& job) {
  return m.gpu() ? 1.0 : double(m.devices_per_node) / job.ranks_per_node;
}

double gemm_ms(const Machine& m, Precision p, double flops, double devices) {
  if (flops <= 0) return 0;
  const PrecisionRates& r = m.rates(p);
  const double per_device = flops / devices / 1e9;  // GFLOP
  const double gflops = r.gemm.empty()
                            ? r.peak_gflops * r.gemm_efficiency
                            : on_curve(
                                  r.gemm, per_device, [](const RatePoint& q) { return q.gflop; },
                                  [](const RatePoint& q) { return q.gflops; });
  return per_device / gflops * 1e3;
}

double attention_ms(const Machine& m, Precision p, double flops, int seq_len, bool backward,
                    double devices) {
  if (flops <= 0) return 0;
  const PrecisionRates& r = m.rates(p);
  double gflops = r.peak_gflops * r.attention_efficiency;
  if (!r.attention.empty()) {
    gflops = on_curve(
        r.attention, double(seq_len), [](const AttentionRate& a) { return double(a.seq_len); },
        [&](const AttentionRate& a) { return backward ? a.backward_gflops : a.forward_gflops; });
  }
  return flops / 1e9 / devices / gflops * 1e3;
}

namespace {

// The shard of stage pp_rank (TP rank 0, EP rank 0) under a placement: layout_stage_shard's,
// without the plan it reads only the placement from.
TpShard stage_shard(const LayoutSizes& sizes, pipeline::ChunkPlacement placement, int pp_rank) {
  const StageOwnership own = stage_ownership(sizes.layer_ranges, pp_rank, sizes.pp, placement);
  return restrict_to_stage(split_experts(make_tp_shard(sizes.cfg, 0, sizes.tp), 0, sizes.ep),
                           own.layers, own.embedding, own.head);
}

// The multi-token prediction modules on the head's stage (model/mtp.hpp), D depths per
// microbatch, each one block of the last block's kind (`block`) beside [enorm | hnorm], eh_proj
// (R x 2C -> C), the embedding of the shifted tokens and the head's logits and loss again. The
// forward runs in the head's F; its B and W at once in the head's B (the forward not run again:
// on the head's stage a microbatch's B follows its F; ZeRO-2/3 does run it again, not counted).
void add_mtp_modules(const Job& job, const Machine& m, const Layout& l, const BlockWork& block,
                     double logits, double Vs, double dev, StageCost& cost) {
  const double D = job.cfg.mtp, C = job.cfg.channels;
  const double R = double(l.micro_batch_size(job)) * (job.seq_len / l.cp);
  const double Rn = l.sequence_parallel ? R / l.tp : R;
  const double bw = m.memory_bandwidth_gbs * 1e6 * dev;
  const Group tp{l.tp, 1};
  const double eh = gemm_ms(m, job.precision, 2 * R * C * 2 * C, dev);
  // The lookup, the two norms and the concat, shared_head.norm; the logits' softmax and loss.
  const double elementwise = (3 * C * R + 10 * C * Rn + 2 * R * Vs) * kFloat / bw;
  OpTime f = block.f;
  f.compute += eh + logits + elementwise;
  f.tp += 3 * allreduce_ms(m, R * kFloat, tp);
  OpTime b = block.b;
  if (l.recompute) add(b, block.f, -1);  // its sets hold the forward
  add(b, block.w);
  b.compute += 2 * eh + 2 * logits + 2 * elementwise;
  b.tp += l.sequence_parallel ? tp_reduce_scatter_ms(job, m, R * C * tp_element(job), tp)
                              : tp_allreduce_ms(job, m, R * C * tp_element(job), tp);
  add(cost.f, f, D);
  add(cost.b, b, D);
}

// Every stage's costs. A block's work depends on the layout's widths, not on its stage.
std::vector<StageCost> stage_costs(const Job& job, const Machine& m, const Layout& l,
                                   pipeline::ChunkPlacement placement, int only = -1) {
  const GPTConfig& cfg = job.cfg;
  const LayoutSizes sizes = sizes_of(job, m, l);
  const double dev = devices_per_rank(m, job);
  const double R = double(sizes.micro_batch) * (job.seq_len / l.cp);
  const double Rn = l.sequence_parallel ? R / l.tp : R;
  const double C = cfg.channels, bw = m.memory_bandwidth_gbs * 1e6 * dev;
  const Group tp{l.tp, 1};
  const TpShard first = stage_shard(sizes, placement, 0);
  const BlockWork block = block_work(job, m, l, first, dev);
  // A mixed model's dense blocks (GPTConfig::mixed) cost a dense MLP of their own width.
  Job dense_job = job;
  dense_job.cfg = cfg.block_config(0);
  const BlockWork dense =
      cfg.mixed() ? block_work(dense_job, m, l, first.block_shard(0), dev) : block;
  std::vector<StageCost> out;
  for (int p = only < 0 ? 0 : only; p < (only < 0 ? l.pp : only + 1); ++p) {
    const StageOwnership own = stage_ownership(sizes.layer_ranges, p, l.pp, placement);
    StageCost cost;
    for (const ChunkPieces& c : own.chunks) {
      int dense_blocks = 0;
      for (int i = c.first_layer; i < c.first_layer + c.layers; ++i)
        dense_blocks += cfg.dense_block(own.layers[size_t(i)]) ? 1 : 0;
      for (const auto& [kind, n] : {std::make_pair(&block, c.layers - dense_blocks),
                                    std::make_pair(&dense, dense_blocks)}) {
        add(cost.f, kind->f, n);
        add(cost.b, kind->b, n);
        add(cost.w, kind->w, n);
      }
      if (c.embedding) {  // a lookup and its scatter; vocab-parallel: summed over TP
        cost.f.compute += 3 * C * R * kFloat / bw;
        cost.b.compute += 3 * C * R * kFloat / bw;
        cost.f.tp += l.sequence_parallel ? tp_reduce_scatter_ms(job, m, R * C * tp_element(job), tp)
                                         : tp_allreduce_ms(job, m, R * C * tp_element(job), tp);
      }
      if (c.head) {  // the final norm, the vocab-parallel logits and their loss
        const TpShard shard = stage_shard(sizes, placement, p);
        const double Vs = shard.vocab_shard;
        const double logits = gemm_ms(m, job.precision, 2 * R * Vs * C, dev);
        cost.f.compute += logits + (4 * C * Rn + 2 * R * Vs) * kFloat / bw;
        cost.b.compute += logits + (4 * C * Rn + 2 * R * Vs) * kFloat / bw;
        cost.w.compute += logits;
        // Pieces of logits are computed again in the backward (head_chunk_rows).
        if (head_chunk_rows(shard, c, sizes.micro_batch, job.seq_len / l.cp, l.sequence_parallel) >
            0) {
          cost.b.compute += logits;
        }
        cost.f.tp += 3 * allreduce_ms(m, R * kFloat, tp);
        cost.b.tp += l.sequence_parallel ? tp_reduce_scatter_ms(job, m, R * C * tp_element(job), tp)
                                         : tp_allreduce_ms(job, m, R * C * tp_element(job), tp);
        if (cfg.mtp > 0) add_mtp_modules(job, m, l, block, logits, Vs, dev, cost);
      }
    }
    const double V = double(own.chunks.size());
    for (OpTime* t : {&cost.f, &cost.b, &cost.w}) {
      t->compute /= V, t->tp /= V, t->cp /= V, t->ep /= V;
    }
    // --p2p-dtype bf16: the activations and their gradients cross as bf16 (pipeline/p2p.hpp).
    cost.p2p_bytes = Rn * C * (job.p2p_bf16 ? 2.0 : kFloat);
    out.push_back(cost);
  }
  return out;
}

pipeline::OpCosts op_costs(const Job& job, const Machine& m, const Layout& l,
                           const std::vector<StageCost>& stages) {
  pipeline::OpCosts costs;
  for (const StageCost& s : stages) {
    costs.forward_by_rank.push_back(s.f.total());
    costs.backward_by_rank.push_back(s.b.total());
    costs.weight_by_rank.push_back(s.w.total());
  }
  const bool pp_across = group_nodes(job, l, "pp") > 1;
  costs.p2p = l.pp > 1 ? p2p_ms(m, stages[0].p2p_bytes, pp_across) : 0.0;
  return costs;
}

// Muon's work beyond AdamW's passes (its momentum pass and the owners' update touch about as many
// bytes as AdamW's update of the same elements, which the caller counts): each matrix is
// orthogonalised by one replica (optim/muon.hpp's muon_owners deals them out), whole on each
// of its TP ranks after an all-gather of the blocks, and the updated block is broadcast to the
// other replicas. Newton-Schulz's three products per iteration run at the GEMM rate of their
// sizes, in the --muon-ns-precision's rates; the busiest replica (of the dense matrices' and of
// the experts') sets the time.
double muon_ms(const Job& job, const Machine& m, const Layout& l, const TpShard& shard, Group dense,
               Group experts, double dev) {
  const std::vector<MuonMatrix> matrices = muon_matrices(job.cfg, SlabLayout::of(shard), shard);
  const std::vector<int> owner = muon_owners(matrices, dense.ranks, experts.ranks);
  std::vector<double> dense_load(size_t(dense.ranks), 0.0), expert_load(size_t(experts.ranks), 0.0);
  double broadcasts = 0;
  const Group tp{l.tp, 1};  // a TP group is on one node (layout_problem)
  for (size_t k = 0; k < matrices.size(); ++k) {
    const MuonMatrix& a = matrices[k];
    const double mm = std::min(a.full_rows(), a.full_cols());
    const double nn = std::max(a.full_rows(), a.full_cols());
    // 5 x (X·Xᵀ, A·A, B·X): newton_schulz_flops at each product's rate.
    double own = 5 * (2 * gemm_ms(m, job.muon_products, 2 * mm * mm * nn, dev) +
                      gemm_ms(m, job.muon_products, 2 * mm * mm * mm, dev));
    if (a.split != MuonSplit::kNone) own += allgather_ms(m, mm * nn * kFloat, tp);
    (a.expert ? expert_load : dense_load)[size_t(owner[k])] += own;
    broadcasts += broadcast_ms(m, double(a.rows) * a.cols * kFloat, a.expert ? experts : dense);
  }
  const double busiest = *std::max_element(dense_load.begin(), dense_load.end()) +
                         *std::max_element(expert_load.begin(), expert_load.end());
  return busiest + broadcasts;
}

// After the pipeline, with stage `busiest` the one the step waits for: the gradients summed over
// DP x CP (the experts' over their own group), in buckets, then AdamW and the step's small
// collectives. Returns {dp, optimizer} ms. `busy_ms`: the stage's compute and model-parallel
// communication in a step, behind which ZeRO-2/3's per-block collectives run.
std::pair<double, double> after_pipeline(const Job& job, const Machine& m, const Layout& l,
                                         pipeline::ChunkPlacement placement, int busiest,
                                         double busy_ms, int64_t slab_count) {
  const double dev = devices_per_rank(m, job);
  const LayoutSizes sizes = sizes_of(job, m, l);
  const TpShard shard = stage_shard(sizes, placement, busiest);
  const PerTensor<int64_t> local = shard.sizes();
  double expert_floats = 0;
  for (int t = 0; t < kNumParameterTensors; ++t) {
    if (shard.is_expert(TensorId(t))) expert_floats += double(local[TensorId(t)]);
  }
  // The stage's slab (SlabLayout::count_of(shard), which the caller keeps), padded as
  // Parameters::slab_floats pads it.
  const int64_t pad = l.dp * l.cp;
  const double slab = double((slab_count + pad - 1) / pad * pad);
  // The trainer's buckets: --dp-bucket-mb's default, as the memory plan counts them.
  auto in_buckets = [&](double bytes, Group g, bool all_gather_only) {
    if (g.ranks <= 1 || bytes <= 0) return 0.0;
    const double buckets = std::ceil(bytes / double(sizes.dp_bucket_bytes));
    const double each = bytes / buckets;
    const double gather = allgather_ms(m, each, g);
    if (all_gather_only) return buckets * gather;
    // --grad-reduce-dtype bf16: the same buckets (cut by fp32 elements) reduced at half the
    // bytes; ZeRO's gather of the parameters stays fp32.
    const double reduced = job.reduce_bf16 ? each / 2 : each;
    // On a GPU that bf16 sum runs on a host copy of each bucket (optim/grad_buckets.hpp).
    if (job.reduce_bf16 && m.gpu()) {
      return buckets * (l.zero ? host_reduce_scatter_ms(m, reduced, g) + gather
                               : host_allreduce_ms(m, reduced, g));
    }
    return buckets *
           (l.zero ? reduce_scatter_ms(m, reduced, g) + gather : allreduce_ms(m, reduced, g));
  };
  const Group dense{l.dp * l.cp, group_nodes(job, l, "dp_cp")};
  const Group experts{l.dp / l.ep * l.cp, group_nodes(job, l, "expert_dp_cp")};
  // HSDP (--zero-group node): ZeRO's collectives within each node's ranks of DP x CP, then each
  // shard (the node's sum) all-reduced in fp32 over its copies on the other nodes, once a step.
  const int shard_ranks = l.zero_node ? zero_node_ranks(job, l) : l.dp * l.cp;
  const Group zeroed = l.zero_node ? Group{shard_ranks, 1} : dense;
  double dp = 0;
  if (l.zero_node) dp += allreduce_ms(m, slab / shard_ranks * kFloat, {dense.nodes, dense.nodes});
  if (l.zero >= 2 && shard.local_layers() > 0) {
    // ZeRO-2/3 (optim/sharded_blocks.hpp): the edge tensors as ZeRO-1; each block's gradients
    // reduce-scattered after every microbatch's W, and under ZeRO-3 its parameters all-gathered
    // before its forward, its B (and W) and a recomputation, each a collective of its own. They
    // run while the stage computes: what exceeds its busy time is exposed, and a step's first
    // gather. ZeRO-2 all-gathers the blocks once after the update, as ZeRO-1 does.
    double block_floats = 0, block_experts = 0;
    for (int t = 0; t < kNumParameterTensors; ++t) {
      if (!tensor_spec(TensorId(t)).per_layer()) continue;
      block_floats += double(local[TensorId(t)]);
      if (shard.is_expert(TensorId(t))) block_experts += double(local[TensorId(t)]);
    }
    const double L = shard.local_layers(), M = l.microbatches;  // L: all its chunks' blocks
    const double dense_block = (block_floats - block_experts) / L * kFloat,
                 expert_block = block_experts / L * kFloat;
    auto per_block = [&](auto collective) {
      double ms = collective(m, dense_block, zeroed);
      if (l.ep > 1 && expert_block > 0) ms += collective(m, expert_block, experts);
      return ms;
    };
    const double gather = per_block(allgather_ms), reduce = per_block(reduce_scatter_ms);
    const double gathers = l.zero == 3 ? (l.recompute || l.selective ? 3 : 2) : 0;
    const double traffic = L * M * (reduce + gathers * gather);
    dp += std::max(0.0, traffic - busy_ms) + (l.zero == 3 ? gather : L * gather);
    const double edges = slab - block_floats;
    dp += in_buckets((edges - (expert_floats - block_experts)) * kFloat, zeroed, false);
    if (l.ep > 1) dp += in_buckets((expert_floats - block_experts) * kFloat, experts, false);
  } else {
    dp += in_buckets((slab - expert_floats) * kFloat, l.zero ? zeroed : dense, false);
    if (l.ep > 1) dp += in_buckets(expert_floats * kFloat, experts, false);
  }
  if (job.cfg.tied && l.pp > 1 && placement == pipeline::ChunkPlacement::kLooped) {
    const bool pp_across = group_nodes(job, l, "pp") > 1;
    dp += allreduce_ms(m, double(shard.vocab_shard) * job.cfg.channels * kFloat,
                       {2, pp_across ? 2 : 1});
  }
  // AdamW reads p, g, m, v and writes p, m, v over its state; the norm reads, zeroing writes,
  // every gradient; bf16 rounds the weights once more. Then the step's small collectives: the
  // loss, the norm, the stop agreement.
  const double state = l.zero ? slab / shard_ranks : slab;
  const double bytes = kFloat * (7 * state + 2 * slab) + (sizes.bf16 ? 6 * slab : 0);
  const Group world{job.world(), job.nodes};
  double optimizer = bytes / (m.memory_bandwidth_gbs * 1e6 * dev) + 3 * allreduce_ms(m, 8, world);
  if (job.muon) {
    optimizer += muon_ms(job, m, l, shard, dense, experts, dev);
    // Under ZeRO-1 each rank's share of the matrices' updates is all-gathered over the slab
    // first (ZeRO's own all-gather, in its buckets), as Muon::step_sharded does.
    if (l.zero) {
      optimizer += in_buckets((slab - expert_floats) * kFloat, dense, true);
      if (l.ep > 1) optimizer += in_buckets(expert_floats * kFloat, experts, true);
    }
  }
  return {dp, optimizer};
}

}  // namespace

StageCost stage_cost(const Job& job, const Machine& m, const Layout& l, int pp_rank) {
  return stage_costs(job, m, l, pipeline::placement_of(l.schedule, l.virtual_stages), pp_rank)[0];
}

Predictor::Predictor(const Job& job, const Machine& m) : job_(job), m_(m) {}

const std::vector<StageCost>& Predictor::stages(const Layout& l) {
  // Everything a stage's costs read: not ZeRO, not the schedule beyond its placement.
  const pipeline::ChunkPlacement placement = pipeline::placement_of(l.schedule, l.virtual_stages);
  const std::vector<int64_t> key{l.tp,           l.cp,
                                 l.ep,           l.pp,
                                 l.dp,           l.virtual_stages,
                                 int(placement), l.micro_batch_size(job_),
                                 l.recompute,    l.sequence_parallel,
                                 l.selective};
  auto it = stage_cache_.find(key);
  if (it == stage_cache_.end()) {
    // A bound on the planner's memory: about 50 MB of stages.
    if (cached_stages_ + size_t(l.pp) > (size_t(1) << 19)) stage_cache_.clear(), cached_stages_ = 0;
    cached_stages_ += size_t(l.pp);
    it = stage_cache_.emplace(key, stage_costs(job_, m_, l, placement)).first;
  }
  return it->second;
}

int64_t Predictor::slab_count(const Layout& l, int pp_rank) {
  // The stage's shard is its TP and EP split of the blocks its placement gives it.
  const pipeline::ChunkPlacement placement = pipeline::placement_of(l.schedule, l.virtual_stages);
  const std::array<int, 6> key{l.tp, l.ep, l.pp, l.virtual_stages, int(placement), pp_rank};
  auto it = slab_counts_.find(key);
  if (it == slab_counts_.end()) {
    const int64_t n = SlabLayout::count_of(stage_shard(sizes_of(job_, m_, l), placement, pp_rank));
    it = slab_counts_.emplace(key, n).first;
  }
  return it->second;
}

const pipeline::PipelineReplay& Predictor::program(const Layout& l,
                                                   const pipeline::OpCosts& costs) {
  const pipeline::PipelineShape shape{l.pp, 0, l.virtual_stages, l.microbatches,
                                      pipeline::placement_of(l.schedule, l.virtual_stages)};
  // zb-auto plans under the costs, so its program is made for each; the others are not.
  if (l.schedule == pipeline::Schedule::kZbAuto) {
    unplanned_ = std::make_unique<pipeline::PipelineReplay>(
        pipeline::SchedulePlan(l.schedule, shape, costs, 0));
    return *unplanned_;
  }
  const std::vector<int64_t> key{int(l.schedule), l.pp, l.virtual_stages, l.microbatches};
  auto it = programs_.find(key);
  if (it == programs_.end()) {
    pipeline::PipelineReplay made{pipeline::SchedulePlan(l.schedule, shape, {}, 0)};
    // A bound on the memory the recorded programs hold: about 200 MB of 12-byte verbs.
    if (program_verbs_ + made.size() > (size_t(1) << 24)) programs_.clear(), program_verbs_ = 0;
    program_verbs_ += made.size();
    it = programs_.emplace(key, std::move(made)).first;
  }
  return it->second;
}

const Predictor::Floor& Predictor::floor(const Layout& l) {
  const std::vector<int64_t> key{int(l.schedule), l.pp, l.virtual_stages};
  auto it = floors_.find(key);
  if (it == floors_.end()) {
    const pipeline::PipelineShape shape{l.pp, 0, l.virtual_stages, l.pp,
                                        pipeline::placement_of(l.schedule, l.virtual_stages)};
    Floor f{pipeline::SchedulePlan(l.schedule, shape, {}, 0), {}};
    const pipeline::SimulationResult order = pipeline::PipelineReplay(f.plan).order();
    for (const std::vector<pipeline::SimEvent>& events : order.events) {
      int acts = 0, w = 0, most_acts = 0, most_w = 0;
      for (const pipeline::SimEvent& e : events) {  // as layout_memory_shape counts them
        if (e.op == pipeline::SimOp::kForward) ++acts;
        if (e.op == pipeline::SimOp::kBackwardInput) ++w;
        if (e.op == pipeline::SimOp::kBackwardWeight) --acts, --w;
        most_acts = std::max(most_acts, acts), most_w = std::max(most_w, w);
      }
      f.peaks.push_back({most_acts, most_w});
    }
    it = floors_.emplace(key, std::move(f)).first;
  }
  return it->second;
}

double Predictor::step_bound(const Layout& l) {
  const std::vector<StageCost>& stages = this->stages(l);
  const pipeline::OpCosts costs = op_costs(job_, m_, l, stages);
  const pipeline::ChunkPlacement placement = pipeline::placement_of(l.schedule, l.virtual_stages);
  const int P = l.pp, V = l.virtual_stages;
  // A rank computes M x V forwards, B and W each; it starts no earlier than its first chunk's
  // input can arrive: the forwards of the virtual stages before it, a P2P between each two ranks.
  double makespan = 0, most = -1;
  std::vector<double> busy(static_cast<size_t>(P), 0.0);
  for (int r = 0; r < P; ++r) {
    busy[size_t(r)] = double(l.microbatches) * V *
                      (costs.forward_on(r) + costs.backward_input_on(r) + costs.weight_by_rank[r]);
    int first = pipeline::virtual_stage(placement, P, r, 0);
    for (int c = 1; c < V; ++c)
      first = std::min(first, pipeline::virtual_stage(placement, P, r, c));
    double start = 0;
    for (int s = 0; s < first; ++s) {
      const int at = pipeline::chunk_site(placement, P, s).rank;
      start += costs.forward_on(at);
      if (pipeline::chunk_site(placement, P, s + 1).rank != at) start += costs.p2p;
    }
    makespan = std::max(makespan, start + busy[size_t(r)]);
    most = std::max(most, busy[size_t(r)]);
  }
  // The simulation's busiest stage is one of those within rounding of the most busy: the least
  // of their DP and optimizer terms bounds the step's.
  // The search weighs a ZeRO layout spanning nodes under HSDP too: the lesser of the two bounds
  // both.
  Layout hsdp = l;
  hsdp.zero_node = true;
  const bool twin =
      l.zero && !l.zero_node && l.ep == 1 && !job_.muon && zero_node_ranks(job_, l) > 0;
  double tail = -1;
  for (int r = 0; r < P; ++r) {
    if (busy[size_t(r)] < most * (1 - 1e-9)) continue;
    for (const Layout* k : {&l, static_cast<const Layout*>(twin ? &hsdp : nullptr)}) {
      if (!k) continue;
      const auto [dp, opt] =
          after_pipeline(job_, m_, *k, placement, r, busy[size_t(r)], slab_count(l, r));
      tail = tail < 0 ? dp + opt : std::min(tail, dp + opt);
    }
  }
  return makespan + tail;
}

MemoryPlan Predictor::stage_memory(const Layout& l, const pipeline::SimulationResult& order,
                                   int pp_rank) {
  // The memory plan reads only the schedule and its placement from a plan, and what is held
  // after each op from `order`: the plan at M = P serves every M.
  const LayoutSizes sizes = sizes_of(job_, m_, l);
  MemoryShape shape = layout_memory_shape(sizes, floor(l).plan, 0, pp_rank, 0, &order);
  shape.process_bytes = int64_t(m_.process_mb * 1e6);
  shape.host_gemm_packing = !m_.gpu();
  return plan_memory(shape);
}

int64_t Predictor::memory_limit() const {
  return m_.gpu() ? int64_t(m_.memory_gb * 1e9) : int64_t(m_.memory_gb * 1e9 / job_.ranks_per_node);
}

MemoryPlan Predictor::memory_bound(const Layout& l) {
  // The memory plan reads only the schedule and its placement from a plan, and what is held
  // after each op from its events. A schedule's most (microbatch, chunk) sets held, and most
  // awaiting W, do not fall as M grows past P (test_plan checks each), so those of a plan at
  // M = P (made once) give a floor under the peak of every M >= P. Not zb-v's (its greedy order
  // holds fewer at M = 9 than at 8 on 8 stages) nor zb-auto's: one microbatch held is theirs.
  const Floor& f = floor(l);
  pipeline::SimulationResult none;
  none.events.resize(size_t(l.pp));
  const LayoutSizes sizes = sizes_of(job_, m_, l);
  MemoryPlan most;
  for (int p : {0, l.pp - 1}) {
    MemoryShape shape = layout_memory_shape(sizes, f.plan, 0, p, 0, &none);
    if (l.microbatches >= l.pp && l.schedule != pipeline::Schedule::kZbV &&
        l.schedule != pipeline::Schedule::kZbAuto) {
      shape.held = {{f.peaks[size_t(p)].first, 0}, {0, f.peaks[size_t(p)].second}};
    } else {
      shape.held = {{1, 0}};  // a microbatch, at least, is held
    }
    shape.process_bytes = int64_t(m_.process_mb * 1e6);
    shape.host_gemm_packing = !m_.gpu();
    MemoryPlan mp = plan_memory(shape);
    if (p == 0 || mp.total() > most.total()) most = mp;
  }
  return most;
}

const std::vector<std::vector<std::pair<int, int>>>& Predictor::held(const Layout& l) {
  const std::vector<int64_t> key{int(l.schedule), l.pp, l.virtual_stages, l.microbatches};
  auto it = held_.find(key);
  if (it == held_.end()) {
    // Each rank's distinct (sets held, sets awaiting W) after its ops, in the order each first
    // comes: the memory plan's peak, and which pair it meets first, are the full list's.
    // Run at unit costs, as the trainer's memory plan simulates its schedule: the program the
    // step's timing replays (recorded once).
    const pipeline::SimulationResult order = program(l, {}).run(pipeline::OpCosts{});
    std::vector<std::vector<std::pair<int, int>>> pairs;
    size_t count = 0;
    for (const std::vector<pipeline::SimEvent>& events : order.events) {
      std::vector<std::pair<int, int>> mine;
      std::set<std::pair<int, int>> seen;
      int acts = 0, w = 0;
      for (const pipeline::SimEvent& e : events) {  // as layout_memory_shape counts them
        if (e.op == pipeline::SimOp::kForward) ++acts;
        if (e.op == pipeline::SimOp::kBackwardInput) ++w;
        if (e.op == pipeline::SimOp::kBackwardWeight) --acts, --w;
        if (seen.insert({acts, w}).second) mine.push_back({acts, w});
      }
      count += mine.size();
      pairs.push_back(std::move(mine));
    }
    if (held_pairs_ + count > (size_t(1) << 23)) held_.clear(), buffers_.clear(), held_pairs_ = 0;
    held_pairs_ += count;
    buffers_[key] = {order.peak_grad_sends, order.peak_grad_receives, order.peak_messages};
    it = held_.emplace(key, std::move(pairs)).first;
  }
  return it->second;
}

MemoryPlan Predictor::memory(const Layout& l) {
  const std::vector<std::vector<std::pair<int, int>>>& pairs = held(l);
  const Buffers& buffers = buffers_.at({int(l.schedule), l.pp, l.virtual_stages, l.microbatches});
  pipeline::SimulationResult none;
  none.events.resize(size_t(l.pp));
  const LayoutSizes sizes = sizes_of(job_, m_, l);
  MemoryPlan most;
  for (int p = 0; p < l.pp; ++p) {
    MemoryShape shape = layout_memory_shape(sizes, floor(l).plan, 0, p, 0, &none);
    shape.held = pairs[size_t(p)];
    shape.grad_sends = buffers.sends[size_t(p)];
    shape.grad_receives = buffers.receives[size_t(p)];
    shape.messages_in_flight = buffers.messages[size_t(p)];
    shape.process_bytes = int64_t(m_.process_mb * 1e6);
    shape.host_gemm_packing = !m_.gpu();
    MemoryPlan mp = plan_memory(shape);
    if (p == 0 || mp.total() > most.total()) most = mp;
  }
  return most;
}

Prediction Predictor::predict(const Layout& l) {
  Prediction out;
  const double dev = devices_per_rank(m_, job_);
  // The pipeline: every stage's costs in the simulation, each message a P2P between stages.
  const std::vector<StageCost>& stages = this->stages(l);
  const pipeline::OpCosts costs = op_costs(job_, m_, l, stages);
  const pipeline::SimulationResult sim = program(l, costs).run(costs);
  int busiest = 0;
  for (int p = 1; p < l.pp; ++p) {
    if (sim.busy[p] > sim.busy[busiest]) busiest = p;
  }
  // The busiest stage's ops, by what they wait for; the rest of the makespan is bubble.
  int forwards = 0, backwards = 0, weights = 0;
  for (const pipeline::SimEvent& e : sim.events[size_t(busiest)]) {
    forwards += e.op == pipeline::SimOp::kForward;
    backwards += e.op == pipeline::SimOp::kBackwardInput;
    weights += e.op == pipeline::SimOp::kBackwardWeight;
  }
  OpTime busy;
  add(busy, stages[busiest].f, forwards);
  add(busy, stages[busiest].b, backwards);
  add(busy, stages[busiest].w, weights);
  out.ms.compute = busy.compute;
  out.ms.tp = busy.tp;
  out.ms.cp = busy.cp;
  out.ms.ep = busy.ep;
  out.ms.bubble = std::max(0.0, sim.makespan - busy.total());
  out.bubble_fraction = sim.bubble_fraction;
  const auto [dp, optimizer] =
      after_pipeline(job_, m_, l, pipeline::placement_of(l.schedule, l.virtual_stages), busiest,
                     busy.total(), slab_count(l, busiest));
  out.ms.dp = dp;
  out.ms.optimizer = optimizer;

  const double step_s = out.ms.step() / 1e3;
  const double tokens = double(job_.batch) * job_.seq_len;
  out.tokens_per_s = tokens / step_s;
  const double peak = m_.rates(job_.precision).peak_gflops * 1e9 * dev * job_.world();
  out.mfu = flops_per_token(job_.cfg, job_.seq_len) * tokens / step_s / peak;

  // Memory: every stage's plan (TP rank 0, EP rank 0), the largest.
  for (int p = 0; p < l.pp; ++p) {
    MemoryPlan mp = stage_memory(l, sim, p);
    if (p == 0 || mp.total() > out.memory.total()) out.memory = mp;
  }
  out.memory_limit = memory_limit();
  out.fits = out.memory.total() <= out.memory_limit;
  return out;
}

Prediction predict(const Job& job, const Machine& m, const Layout& l) {
  return Predictor(job, m).predict(l);
}

}  // namespace mpf::plan
