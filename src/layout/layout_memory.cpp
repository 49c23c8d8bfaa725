#include "layout/layout_memory.hpp"

#include <algorithm>

#include "model/activations.hpp"
#include "optim/muon.hpp"

namespace mpf {

TpShard layout_stage_shard(const LayoutSizes& l, const pipeline::SchedulePlan& plan, int tp_rank,
                           int pp_rank, int ep_rank) {
  const StageOwnership own = stage_ownership(l.layer_ranges, pp_rank, l.pp, plan.shape().placement);
  const TpShard tp = make_tp_shard(l.cfg, tp_rank, l.tp);
  return restrict_to_stage(split_experts(tp, ep_rank, l.ep), own.layers, own.embedding, own.head);
}

int64_t largest_bf16_operand(const TpShard& shard, int rows) {
  // Not the vocabulary shard: the LM head's logits and their gradient are kept in bf16, which its
  // products read as they are.
  const int64_t width =
      std::max<int64_t>({shard.widest_mlp_in(), shard.qkv, int64_t(shard.cfg.channels)});
  return int64_t(rows) * width;
}

MemoryShape layout_memory_shape(const LayoutSizes& l, const pipeline::SchedulePlan& plan,
                                int tp_rank, int pp_rank, int ep_rank,
                                const pipeline::SimulationResult* step) {
  const bool zero_bubble = pipeline::is_zero_bubble(plan.schedule());
  const int local_seq = l.seq_len / l.cp;
  MemoryShape m;
  m.shard = layout_stage_shard(l, plan, tp_rank, pp_rank, ep_rank);
  m.chunks = stage_ownership(l.layer_ranges, pp_rank, l.pp, plan.shape().placement).chunks;
  for (ChunkPieces& c : m.chunks) {
    c.recompute = l.recompute;
    c.selective = l.selective;
    c.bf16 = l.bf16;          // as TrainingRun::set_up_stage sets them
    c.shared_scratch = true;  // as ModelStage sets it
    c.lent_output = lent_output(c, l.recompute, l.p2p_bf16);  // as build_stage sets it
    // As ModelStage::set_weight_with_input sets them.
    if (!zero_bubble) {
      c.logit_rows = head_chunk_rows(m.shard, c, l.micro_batch, local_seq, l.sequence_parallel);
    }
  }
  m.micro_batch = l.micro_batch;
  m.seq_len = local_seq;
  m.cp = l.cp;
  m.sequence_parallel = l.sequence_parallel;
  m.recompute = l.recompute;
  m.weight_with_input = !zero_bubble;
  // What the rank holds after each of its ops, from its schedule simulated.
  const pipeline::SimulationResult sim =
      step ? pipeline::SimulationResult{} : pipeline::simulate(plan);
  const pipeline::SimulationResult& run = step ? *step : sim;
  if (!run.peak_grad_sends.empty()) {
    m.grad_sends = run.peak_grad_sends[size_t(pp_rank)];
    m.grad_receives = run.peak_grad_receives[size_t(pp_rank)];
    m.messages_in_flight = run.peak_messages[size_t(pp_rank)];
  }
  int acts = 0, w = 0;
  for (const pipeline::SimEvent& e : run.events[size_t(pp_rank)]) {
    if (e.op == pipeline::SimOp::kForward) ++acts;
    if (e.op == pipeline::SimOp::kBackwardInput) ++w;
    if (e.op == pipeline::SimOp::kBackwardWeight) --acts, --w;
    m.held.push_back({acts, w});
  }
  m.bf16 = l.bf16;
  m.bf16_scratch = largest_bf16_operand(m.shard, l.micro_batch * local_seq);
  m.dp_cp = l.dp_cp;
  m.zero_ranks = l.zero_ranks > 0 ? l.zero_ranks : l.dp_cp;
  m.zero = l.zero && l.dp_cp > 1;
  m.zero_stage = l.zero_stage;
  m.staged_mpi = l.staged_mpi;
  m.p2p_bf16 = l.p2p_bf16;
  m.reduce_bf16 = l.reduce_bf16;
  m.tp_bf16 = l.tp_bf16;
  m.muon_work = l.muon ? muon_workspace_floats(m.shard) : 0;
  m.pipeline_stages = l.pp;
  m.muon_floats = l.muon ? muon_floats(SlabLayout::of(m.shard)) : 0;
  m.threads = l.threads;
  m.attention = l.attention;
  m.dp_bucket_bytes = l.dp_bucket_bytes;
  m.tied_across_stages = l.cfg.wte_with_head() && l.pp > 1 &&
                         plan.shape().placement == pipeline::ChunkPlacement::kLooped;
  return m;
}

}  // namespace mpf
