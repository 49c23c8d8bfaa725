#include "plan/cost_model.hpp"

#include <algorithm>
#include <cmath>

#include "model/activations.hpp"
#include "model/parameters.hpp"
#include "model/tensors.hpp"
#include "pipeline/layer_ownership.hpp"
#include "pipeline/simulator.hpp"
#include "plan/comm_model.hpp"
#include "train/layout_memory.hpp"
#include "train/step_log.hpp"

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
  s.zero = l.zero;
  s.bf16 = job.precision == Precision::bf16;
  s.threads = m.gpu() ? 1 : std::max(1, int(devices_per_rank(m, job)));
  return s;
}

pipeline::SchedulePlan schedule_plan(const Layout& l, const pipeline::OpCosts& costs = {}) {
  const pipeline::PipelineShape shape{l.pp, 0, l.virtual_stages, l.microbatches,
                                      pipeline::placement_of(l.schedule, l.virtual_stages)};
  // zb-auto plans under P microbatches in flight, as the trainer does by default.
  return pipeline::SchedulePlan(l.schedule, shape, costs, 0);
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
  // TP: two entries and two exits per block each way (all-reduces, or all-gathers and
  // reduce-scatters with sequence parallelism: the same traffic).
  const Group tp{l.tp, 1};
  const double act = R * C * kFloat;
  out.f.tp = l.sequence_parallel ? 2 * (allgather_ms(m, act, tp) + reduce_scatter_ms(m, act, tp))
                                 : 2 * allreduce_ms(m, act, tp);
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
  if (l.ep > 1) {
    const Group ep{l.ep, group_nodes(job, l, "ep")};
    const double rows = R * cfg.experts_per_token * C * kFloat;
    out.f.ep = alltoall_ms(m, cfg.experts * 4.0 * l.ep, ep) + 2 * alltoall_ms(m, rows, ep);
    out.b.ep = out.f.ep;
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

StageCost stage_cost_in(const Job& job, const Machine& m, const Layout& l,
                        const pipeline::SchedulePlan& plan, int pp_rank) {
  const GPTConfig& cfg = job.cfg;
  const LayoutSizes sizes = sizes_of(job, m, l);
  const TpShard shard = layout_stage_shard(sizes, plan, 0, pp_rank, 0);
  const StageOwnership own =
      stage_ownership(sizes.layer_ranges, pp_rank, l.pp, plan.shape().placement);
  const double dev = devices_per_rank(m, job);
  const double R = double(sizes.micro_batch) * (job.seq_len / l.cp);
  const double Rn = l.sequence_parallel ? R / l.tp : R;
  const double C = cfg.channels, bw = m.memory_bandwidth_gbs * 1e6 * dev;
  const Group tp{l.tp, 1};
  StageCost cost;
  const BlockWork block = block_work(job, m, l, shard, dev);
  for (const ChunkPieces& c : own.chunks) {
    add(cost.f, block.f, c.layers);
    add(cost.b, block.b, c.layers);
    add(cost.w, block.w, c.layers);
    if (c.embedding) {  // a lookup and its scatter; vocab-parallel: summed over TP
      cost.f.compute += 3 * C * R * kFloat / bw;
      cost.b.compute += 3 * C * R * kFloat / bw;
      cost.f.tp += l.sequence_parallel ? reduce_scatter_ms(m, R * C * kFloat, tp)
                                       : allreduce_ms(m, R * C * kFloat, tp);
    }
    if (c.head) {  // the final norm, the vocab-parallel logits and their loss
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
      cost.b.tp += l.sequence_parallel ? reduce_scatter_ms(m, R * C * kFloat, tp)
                                       : allreduce_ms(m, R * C * kFloat, tp);
    }
  }
  const double V = double(own.chunks.size());
  for (OpTime* t : {&cost.f, &cost.b, &cost.w}) {
    t->compute /= V, t->tp /= V, t->cp /= V, t->ep /= V;
  }
  cost.p2p_bytes = Rn * C * kFloat;
  return cost;
}

}  // namespace

StageCost stage_cost(const Job& job, const Machine& m, const Layout& l, int pp_rank) {
  return stage_cost_in(job, m, l, schedule_plan(l), pp_rank);
}

Prediction predict(const Job& job, const Machine& m, const Layout& l) {
  Prediction out;
  const double dev = devices_per_rank(m, job);
  // The pipeline: every stage's costs in the simulator, each message a P2P between stages.
  std::vector<StageCost> stages;
  pipeline::OpCosts costs;
  const pipeline::SchedulePlan unit_plan = schedule_plan(l);  // the shards' placement
  for (int p = 0; p < l.pp; ++p) {
    stages.push_back(stage_cost_in(job, m, l, unit_plan, p));
    costs.forward_by_rank.push_back(stages.back().f.total());
    costs.backward_by_rank.push_back(stages.back().b.total());
    costs.weight_by_rank.push_back(stages.back().w.total());
  }
  const bool pp_across = group_nodes(job, l, "pp") > 1;
  costs.p2p = l.pp > 1 ? p2p_ms(m, stages[0].p2p_bytes, pp_across) : 0.0;
  // zb-auto plans under the costs; the other schedules do not depend on them.
  const pipeline::SchedulePlan plan =
      l.schedule == pipeline::Schedule::kZbAuto ? schedule_plan(l, costs) : unit_plan;
  const pipeline::SimulationResult sim = pipeline::simulate(plan, costs);
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

  // After the pipeline: the gradients summed over DP x CP (the experts' over their own group),
  // in buckets, then AdamW.
  const LayoutSizes sizes = sizes_of(job, m, l);
  const TpShard shard = layout_stage_shard(sizes, plan, 0, busiest, 0);
  const PerTensor<int64_t> local = shard.sizes();
  double expert_floats = 0;
  for (int t = 0; t < kNumParameterTensors; ++t) {
    if (shard.is_expert(TensorId(t))) expert_floats += double(local[TensorId(t)]);
  }
  const double slab = double(Parameters::slab_floats(shard, l.dp * l.cp));
  auto sum_ms = [&](double bytes, Group g) {
    if (g.ranks <= 1 || bytes <= 0) return 0.0;
    // The trainer's buckets: --dp-bucket-mb's default, as the memory plan counts them.
    const double buckets = std::ceil(bytes / double(sizes.dp_bucket_bytes));
    const double each = bytes / buckets;
    return buckets * (l.zero ? reduce_scatter_ms(m, each, g) + allgather_ms(m, each, g)
                             : allreduce_ms(m, each, g));
  };
  out.ms.dp = sum_ms((slab - expert_floats) * kFloat, {l.dp * l.cp, group_nodes(job, l, "dp_cp")});
  if (l.ep > 1) {
    out.ms.dp +=
        sum_ms(expert_floats * kFloat, {l.dp / l.ep * l.cp, group_nodes(job, l, "expert_dp_cp")});
  }
  if (job.cfg.tied && l.pp > 1 && plan.shape().placement == pipeline::ChunkPlacement::kLooped) {
    out.ms.dp += allreduce_ms(m, double(shard.vocab_shard) * job.cfg.channels * kFloat,
                              {2, pp_across ? 2 : 1});
  }
  // AdamW reads p, g, m, v and writes p, m, v over its state; the norm reads, zeroing writes,
  // every gradient; bf16 rounds the weights once more. Then the step's small collectives: the
  // loss, the norm, the stop agreement.
  const double state = l.zero ? slab / (l.dp * l.cp) : slab;
  const double bytes = kFloat * (7 * state + 2 * slab) + (sizes.bf16 ? 6 * slab : 0);
  const Group world{job.world(), job.nodes};
  out.ms.optimizer = bytes / (m.memory_bandwidth_gbs * 1e6 * dev) + 3 * allreduce_ms(m, 8, world);

  const double step_s = out.ms.step() / 1e3;
  const double tokens = double(job.batch) * job.seq_len;
  out.tokens_per_s = tokens / step_s;
  const double peak = m.rates(job.precision).peak_gflops * 1e9 * dev * job.world();
  out.mfu = flops_per_token(job.cfg, job.seq_len) * tokens / step_s / peak;

  // Memory: every stage's plan (TP rank 0, EP rank 0), the largest.
  for (int p = 0; p < l.pp; ++p) {
    MemoryShape shape = layout_memory_shape(sizes, plan, 0, p, 0, &sim);
    shape.process_bytes = int64_t(m.process_mb * 1e6);
    shape.host_gemm_packing = !m.gpu();
    MemoryPlan mp = plan_memory(shape);
    if (p == 0 || mp.total() > out.memory.total()) out.memory = mp;
  }
  out.memory_limit =
      m.gpu() ? int64_t(m.memory_gb * 1e9) : int64_t(m.memory_gb * 1e9 / job.ranks_per_node);
  out.fits = out.memory.total() <= out.memory_limit;
  return out;
}

}  // namespace mpf::plan
