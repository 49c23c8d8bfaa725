// A rank's MemoryShape from a layout's sizes alone, without communicators: the run builds its
// memory plan through this, and the layout planner predicts every candidate's memory with the
// same call, so the two cannot drift apart.
#pragma once

#include <vector>

#include "layout/memory_plan.hpp"
#include "model/config.hpp"
#include "pipeline/layer_ownership.hpp"
#include "pipeline/schedule_plan.hpp"
#include "pipeline/simulator.hpp"

namespace mpf {

struct LayoutSizes {
  GPTConfig cfg;
  int tp = 1, cp = 1, pp = 1, ep = 1;
  int dp_cp = 1;                         // ranks whose gradients are summed (DP x CP)
  int micro_batch = 1;                   // rows per microbatch
  int seq_len = 1;                       // tokens per sequence (all CP ranks')
  std::vector<LayerRange> layer_ranges;  // the pp x V chunks' blocks
  // Ranks a ZeRO shard is split over (a node's under --zero-group node); 0: dp_cp.
  int zero_ranks = 0;
  bool sequence_parallel = false, recompute = false, zero = false, bf16 = false;
  bool selective = false;  // --recompute selective (recompute: full)
  int zero_stage = 1;      // with zero: --zero's stage (the planner's layouts: 1)
  bool staged_mpi = false;
  bool p2p_bf16 = false;     // --p2p-dtype bf16
  bool reduce_bf16 = false;  // --grad-reduce-dtype bf16
  bool tp_bf16 = false;      // --tp-comm-dtype bf16
  bool muon = false;         // --optimizer muon: its workspace (the gathered whole matrices)
  AttentionPath attention = AttentionPath::kFused;
  int threads = 1;
  int64_t dp_bucket_bytes = 25000000;  // --dp-bucket-mb's default
};

// The shard of stage pp_rank on TP rank tp_rank and EP rank ep_rank.
TpShard layout_stage_shard(const LayoutSizes& l, const pipeline::SchedulePlan& plan, int tp_rank,
                           int pp_rank, int ep_rank);

// Elements of each of bf16's two operand buffers: a microbatch's rows times the widest
// activation a product rounds as it reads it (the MLP, QKV; the logits are bf16 already).
int64_t largest_bf16_operand(const TpShard& shard, int rows);

// The rank's memory shape, data_bytes and process_bytes left 0 (the caller's to add). What it
// holds after each op comes from the plan simulated, or from `step`, a simulation of the same
// plan under any costs (its ops' order on each rank is the plan's).
MemoryShape layout_memory_shape(const LayoutSizes& l, const pipeline::SchedulePlan& plan,
                                int tp_rank, int pp_rank, int ep_rank,
                                const pipeline::SimulationResult* step = nullptr);

}  // namespace mpf
