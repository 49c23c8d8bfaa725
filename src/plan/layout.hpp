// What the planner chooses among: a job (the model, the global batch, the allocation) and a
// layout of it (tp, cp, ep, pp, dp, virtual stages, schedule, microbatches, recompute, sequence
// parallelism, ZeRO), the checks that exclude a layout before any cost is counted (it does not
// divide, or puts a TP group across nodes) and the trainer flags that run it.
#pragma once

#include <string>
#include <vector>

#include "core/bf16.hpp"
#include "model/config.hpp"
#include "pipeline/schedule.hpp"

namespace mpf::plan {

// The most ranks a job or a layout's size may have: far past any allocation, and low enough
// that a product of sizes stays in range (tp=65536,cp=65536 is one error, not an overflow).
constexpr int kMaxRanks = 1 << 20;
// The most microbatches --evaluate takes: a pipeline's simulation of 128 stages of them takes
// seconds, and past it the simulator's watchdog would end the program.
constexpr int kMaxMicrobatches = 4096;

struct Job {
  GPTConfig cfg;
  int batch = 1;    // sequences per step, over all ranks
  int seq_len = 1;  // tokens per sequence
  Precision precision = Precision::fp32;
  // --optimizer muon: the blocks' matrices by Muon, and its Newton-Schulz products' precision.
  bool muon = false;
  Precision muon_products = Precision::fp32;
  // --p2p-dtype bf16 and --grad-reduce-dtype bf16 (bf16 products only): the pipeline's messages
  // and the DP gradient buckets at 2 bytes an element, as the trainer sends them.
  bool p2p_bf16 = false, reduce_bf16 = false;
  // --tp-comm-dtype bf16 (bf16 products only): the TP collectives' activations and their
  // gradients at 2 bytes an element; the loss's statistics stay fp32.
  bool tp_bf16 = false;
  int nodes = 1, ranks_per_node = 1;
  int world() const { return nodes * ranks_per_node; }
};

struct Layout {
  int tp = 1, cp = 1, ep = 1, pp = 1, dp = 1;
  int virtual_stages = 1;
  pipeline::Schedule schedule = pipeline::Schedule::kOneFOneB;
  int microbatches = 1;  // per DP rank and step
  bool recompute = false, sequence_parallel = false;
  bool selective = false;  // --recompute selective (recompute: full)
  int zero = 0;            // --zero's stage: 0 (none) to 3
  // --zero-group node (HSDP): ZeRO's shards over a node's ranks of each DP x CP group, replicated
  // over its nodes (optim/grad_buckets.hpp), rather than over the whole group.
  bool zero_node = false;

  int micro_batch_size(const Job& job) const { return job.batch / dp / microbatches; }
};

// "tp=2,pp=2,dp=1,schedule=1f1b,microbatches=4,recompute=1,sp=1,zero=1,vp=2,cp=1,ep=1" (any
// subset; recompute is 0, 1, none, full or selective; zero 0 to 3; zero_group all or node;
// dp defaults to the ranks left,
// microbatches to 1 or, for micro_batch_size=b, to batch / (dp b)); InputError naming a key it does
// not know or a value it cannot read, a key given twice, an empty item or layout, a size past
// kMaxRanks or sizes whose product is, more than kMaxMicrobatches microbatches.
Layout parse_layout(const std::string& text, const Job& job);

// Why the layout cannot run the job ("" when it can): the product of its sizes is not the
// world, a size does not divide what it splits, the schedule cannot run its shape, or a TP group
// spans nodes. Memory is the cost model's question, not this one.
std::string layout_problem(const Job& job, const Layout& l);

// The nodes a group of ranks spans: the group along `dim` ("tp", "cp", "ep", "dp", "dp_cp",
// "expert_dp_cp", "pp") that holds world rank 0, placed in blocks of ranks_per_node
// (Megatron's order: world rank = tp + T (cp + N (dp + D pp)), TP fastest).
int group_nodes(const Job& job, const Layout& l, const std::string& dim);

// Under --zero-group node: the ranks of a DP x CP group on each of its nodes, when it spans two
// or more nodes with as many on each (what the trainer needs); 0 otherwise.
int zero_node_ranks(const Job& job, const Layout& l);

// The trainer's layout flags for it: "--tp 2 --pp 2 --microbatches 4 ...".
std::string layout_flags(const Layout& l);
// The same without --tp, --pp and --dp (a job script's TP, PP and DP), with a leading space.
std::string layout_extra_flags(const Layout& l);
// "tp=2,cp=1,..." as --evaluate takes it.
std::string layout_text(const Layout& l);

}  // namespace mpf::plan
