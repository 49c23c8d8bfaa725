// The memory a rank will hold at its peak, predicted from the run's shapes before anything is
// allocated, term by term: what the banner and --dry-run print, and what a start refuses when it
// exceeds the memory the rank may use (the node's MemAvailable over its ranks, or
// --memory-per-rank). Each term is computed by the same size functions the allocations use
// (Parameters, Activations, WeightGradInputs, BackwardBuffers, the ring's blocks), so the two
// cannot drift apart; tests/cli/memory_plan.sh holds the prediction against the peak resident
// set measured on runs of several layouts, lengths, recomputation and precisions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/activations.hpp"
#include "model/layers/attention_path.hpp"
#include "model/shard.hpp"

namespace mpf {

struct MemoryShape {
  TpShard shard;                    // this rank's stage
  std::vector<ChunkPieces> chunks;  // its chunks, recompute already set in each
  int micro_batch = 1;
  int seq_len = 1;  // the rows of each sequence this rank holds (T / cp)
  int cp = 1;       // context-parallel ranks (ring attention's blocks when > 1)
  bool sequence_parallel = false;
  bool recompute = false;
  bool weight_with_input = true;  // the classic schedules: W with B, two blocks' W inputs
  // After each compute op of this rank's step, in program order (the schedule simulated): the
  // (microbatch, chunk) activation sets it holds (forward done, W not) and the W-input sets (B
  // done, W not).
  std::vector<std::pair<int, int>> held;
  // The pipeline's message buffers (pipeline::SimulationResult): the pools of input gradients
  // sent and output gradients received, and a staged MPI's host copies of every message.
  int grad_sends = 0, grad_receives = 0, messages_in_flight = 0;
  // --p2p-dtype bf16: each message in flight also has a bf16 wire buffer, and the host copies
  // are bf16 (pipeline/p2p.hpp).
  bool p2p_bf16 = false;
  // --grad-reduce-dtype bf16: a DP bucket is reduced through a bf16 copy (optim/grad_buckets.hpp).
  bool reduce_bf16 = false;
  // --tp-comm-dtype bf16: the TP collectives go through one bf16 wire buffer
  // (parallel/device_mpi.hpp), as large as the largest payload.
  bool tp_bf16 = false;
  bool bf16 = false;
  int64_t bf16_scratch = 0;  // elements of each of Bf16Products' two operand buffers
  int dp_cp = 1;             // ranks whose gradients are summed (DP x CP)
  // Ranks a ZeRO shard is split over: dp_cp, or a node's under --zero-group node (HSDP); 0: dp_cp.
  int zero_ranks = 0;
  int shard_ranks() const { return zero_ranks > 0 ? zero_ranks : dp_cp; }
  bool zero = false;
  // With zero: 1, or 2 and 3 (optim/sharded_blocks.hpp): the blocks' gradients (and under 3
  // their parameters) held as this rank's shard and a pool of two whole blocks.
  int zero_stage = 1;
  // The model alone (mpiformer-eval): no gradients and no optimizer state, and the forward only:
  // no backward buffers, W inputs or MTP modules' sets.
  bool model_only = false;
  // A background save's host copy of the parameters and moments (--save with --save-async).
  bool checkpoint_staging = false;
  // --optimizer muon: its Newton-Schulz workspace (optim/muon.hpp), in floats; 0 without it.
  int64_t muon_work = 0;
  // --optimizer muon: the elements of its matrices in this rank's slab (optim/muon.hpp's
  // muon_floats), which have a first moment and no second; 0 without it.
  int64_t muon_floats = 0;
  bool staged_mpi = false;  // messages through pinned host copies
  int pipeline_stages = 1;
  // The all-reduces in place that an MPI library runs through a temporary copy of their buffer
  // (MPICH's reduction does): the DP gradient buckets' (when dp_cp > 1) and the tied embedding's
  // sum between the pipeline's ends.
  int64_t dp_bucket_bytes = 0;
  bool tied_across_stages = false;
  int threads = 1;
  AttentionPath attention = AttentionPath::kFused;  // whose scratch the workspace holds
  // The products run through a CPU library that packs an operand per call (not on a GPU).
  bool host_gemm_packing = true;
  int64_t data_bytes = 0;     // token files, mapped and read through at start-up
  int64_t process_bytes = 0;  // resident before the model: libraries, MPI, Kokkos, the program
};

struct MemoryTerm {
  std::string name;  // "activations"
  int64_t bytes = 0;
  std::string detail;  // "2 microbatches in flight x 1.2 GB"
  std::string shrink;  // the flags that make it smaller, for a refusal
};

struct MemoryPlan {
  std::vector<MemoryTerm> terms;
  int64_t total() const;
  // The largest term, the process's own baseline and the data included (which no flag shrinks).
  const MemoryTerm& largest() const;
  // "predicted peak 6.21 GB/rank = parameters 0.50 GB + gradients 0.50 GB + ..."
  std::string summary() const;
};

// "6.21 GB".
std::string gigabytes(int64_t bytes);

MemoryPlan plan_memory(const MemoryShape& s);

// This process's resident set now, and the most it has held (Linux /proc/self/status: VmRSS,
// VmHWM); 0 where they cannot be read.
int64_t resident_bytes();
int64_t peak_resident_bytes();
// MemAvailable of /proc/meminfo (0 where unknown).
int64_t available_bytes();

}  // namespace mpf
