#include "layout/memory_plan.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "core/bf16.hpp"
#include "model/gpt.hpp"
#include "model/layers/attention_path.hpp"
#include "model/layers/chunked_attention.hpp"
#include "model/layers/ring_attention.hpp"
#include "model/mtp.hpp"
#include "model/parameters.hpp"

namespace mpf {

std::string gigabytes(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GB", double(bytes) / 1e9);
  return buf;
}

namespace {

// A line "Key:   N kB" of a /proc file, in bytes; 0 if absent.
int64_t proc_kb(const char* file, const char* key) {
  std::ifstream in(file);
  std::string line;
  const std::string want = std::string(key) + ":";
  while (std::getline(in, line)) {
    if (line.compare(0, want.size(), want) != 0) continue;
    std::istringstream fields(line.substr(want.size()));
    int64_t kb = 0;
    fields >> kb;
    return kb * 1024;
  }
  return 0;
}

}  // namespace

int64_t resident_bytes() {
  return proc_kb("/proc/self/status", "VmRSS");
}

int64_t peak_resident_bytes() {
  return proc_kb("/proc/self/status", "VmHWM");
}

int64_t available_bytes() {
  return proc_kb("/proc/meminfo", "MemAvailable");
}

int64_t MemoryPlan::total() const {
  int64_t n = 0;
  for (const MemoryTerm& t : terms) n += t.bytes;
  return n;
}

const MemoryTerm& MemoryPlan::largest() const {
  const MemoryTerm* best = &terms.front();
  for (const MemoryTerm& t : terms) {
    if (t.bytes > best->bytes) best = &t;
  }
  return *best;
}

std::string MemoryPlan::summary() const {
  std::string s = "predicted peak " + gigabytes(total()) + "/rank =";
  bool first = true;
  for (const MemoryTerm& t : terms) {
    if (t.bytes == 0) continue;
    s += std::string(first ? " " : " + ") + t.name + " " + gigabytes(t.bytes);
    first = false;
  }
  return s;
}

namespace {

constexpr int64_t f = int64_t(sizeof(float));

// Appends a term to a plan.
struct Terms {
  MemoryPlan& plan;
  void operator()(std::string name, int64_t bytes, std::string detail, std::string shrink) const {
    plan.terms.push_back({std::move(name), bytes, std::move(detail), std::move(shrink)});
  }
};

// The elements of the largest of the shard's blocks' stretches of the slab (0 without blocks).
int64_t largest_block(const TpShard& shard) {
  int64_t block = 0;
  for (int64_t n : SlabLayout::block_lengths(shard)) block = std::max(block, n);
  return block;
}

void add_state_terms(const MemoryShape& s, const Terms& add) {
  const TpShard& shard = s.shard;
  // The slabs: parameters and gradients padded to a multiple of the DP x CP ranks (ZeRO's
  // buckets), AdamW's moments (this rank's shard under ZeRO), the bf16 copy of the weights.
  const int64_t count = Parameters::slab_floats(shard, s.dp_cp);
  const int64_t state = s.zero ? count / s.shard_ranks() : count;
  // ZeRO-2/3 (optim/sharded_blocks.hpp): of the blocks' stretch of a sharded slab this rank
  // writes only its part of each block (the rest takes no memory), and the pool holds two whole
  // blocks (and two of its parts) besides.
  const int stage = s.zero && !s.model_only ? s.zero_stage : 0;
  int64_t block = 0, blocks = 0, parts = 0;  // the largest block; all blocks, and their parts
  for (int64_t n : SlabLayout::block_lengths(shard)) {
    block = std::max(block, n);
    blocks += n;
    parts += (n + s.shard_ranks() - 1) / s.shard_ranks();
  }
  const int64_t part = (block + s.shard_ranks() - 1) / s.shard_ranks();
  // On the host the pages of the blocks' stretch no rank writes take no memory; a device
  // allocation is whole (the saving there needs the device's virtual memory mapping: not yet).
  const int64_t unwritten = kDeviceMemory ? 0 : blocks - parts;
  const int64_t sharded = count - unwritten;  // the slab's elements this rank holds
  const int64_t weights16 = s.bf16 && stage < 3 ? count * int64_t(sizeof(bf16)) : 0;
  // The model alone (mpiformer-eval) holds no gradients and no optimizer state, and says so.
  const std::string kept = s.bf16 ? "fp32, and their bf16 copy" : "fp32";
  if (stage == 3) {
    add("parameters", (sharded + 2 * block) * f,
        "fp32: the edge tensors whole, this rank's ZeRO-3 shard of the blocks and two blocks "
        "gathered",
        "--tp, --pp");
  } else {
    add("parameters", count * f + weights16,
        s.model_only ? kept + "; the model alone: no gradients, no optimizer state" : kept,
        "--tp, --pp, --zero 3");
  }
  if (s.model_only) return;
  // Under ZeRO the summed gradients of this rank's shard, and staged, host copies of the slab.
  const int64_t zero_grads = s.zero ? state * f : 0;
  const int64_t staged = s.staged_mpi ? count * f + zero_grads : 0;
  if (stage >= 2) {
    add("gradients", (count - (kDeviceMemory ? 0 : blocks) + 2 * (block + part)) * f + zero_grads,
        "the edge tensors', two blocks' in the reduction pool and the ZeRO shard's sum",
        "--tp, --pp");
  } else {
    add("gradients", count * f + zero_grads + staged, s.zero ? "and the ZeRO shard's sum" : "",
        "--tp, --pp, --zero 2");
  }
  // Under Muon its matrices' momentum is AdamW's m at their places, and v holds AdamW's own
  // segments only (optim/adamw.hpp): one moment for the matrices. Under ZeRO the shard holds
  // about its 1/D of them, as of everything (each bucket is cut evenly over the ranks).
  const int64_t second = state - (s.zero ? s.muon_floats / s.shard_ranks() : s.muon_floats);
  const std::string moments = s.muon_floats > 0
                                  ? "AdamW's m (with Muon's momentum) and v (AdamW's tensors only)"
                                  : "AdamW's m and v";
  add("optimizer", (state + second) * f, s.zero ? moments + ", this rank's ZeRO shard" : moments,
      s.zero ? "--tp, --pp" : "--zero 1, --tp, --pp");
  if (s.muon_work > 0) {
    add("muon workspace", s.muon_work * f,
        "the largest matrix's momentum update, its blocks gathered over TP, the whole matrix and "
        "Newton-Schulz's buffers (under ZeRO-1 the gradient slab gathers the updates)",
        "--pp");
  }
  if (s.checkpoint_staging) {
    add("checkpoint staging", (count + state + second) * f,
        "a host copy of the parameters and AdamW's m and v, written in the background",
        "--save-async 0");
  }
}

void add_activation_terms(const MemoryShape& s, const Terms& add) {
  const TpShard& shard = s.shard;
  // Activations: the most (microbatch, chunk) sets held at once, each its chunk's activations;
  // W inputs: one set of two blocks when W goes with B, else one per set held.
  int64_t largest_chunk = 0, largest_w = 0;
  for (const ChunkPieces& c : s.chunks) {
    largest_chunk = std::max(
        largest_chunk, Activations::bytes(shard, c, s.micro_batch, s.seq_len, s.sequence_parallel));
    ChunkPieces w = c;
    if (s.weight_with_input) {  // as ModelStage::weight_pieces
      w.layers = std::min(w.layers, 2);
      w.recompute = false;
    }
    largest_w = std::max(largest_w, WeightGradInputs::bytes(shard, w, s.micro_batch, s.seq_len,
                                                            s.sequence_parallel));
  }
  // The schedule's peak of the two together (with W deferred, the sets awaiting W are not all
  // held when the most activations are).
  int64_t peak = 0, activations = 0, w_sets = 0;
  int sets = 0;
  for (const auto& [a, w] : s.held) {
    const int64_t bytes = a * largest_chunk + w * largest_w;
    if (bytes <= peak) continue;
    peak = bytes;
    activations = a * largest_chunk;
    w_sets = w * largest_w;
    sets = a;
  }
  char held[96];
  std::snprintf(held, sizeof held, "%d (microbatch, chunk) set(s) in flight x %s", sets,
                gigabytes(largest_chunk).c_str());
  add("activations", activations, held,
      s.recompute ? "--micro-batch-size, --cp, --tp with --sequence-parallel, --pp"
                  : "--recompute, --micro-batch-size, --cp, --tp with --sequence-parallel");
  // The model alone runs no backward: nothing awaits W.
  add("weight-gradient inputs", s.model_only ? 0 : w_sets,
      s.weight_with_input ? "two blocks' (W runs with B)" : "one set per microbatch awaiting W",
      "--micro-batch-size, --cp, a classic --schedule");
}

void add_message_terms(const MemoryShape& s, const Terms& add) {
  const TpShard& shard = s.shard;
  // Messages: the ring's K/V blocks and their accumulators, the pipeline's pools of input
  // gradients sent and output gradients received (as many as the schedule has in flight, not one
  // per set held), and when staged the host copies of the messages in flight.
  int64_t messages = RingAttention::bytes(s.cp, s.micro_batch, s.seq_len * s.cp, shard.kv_heads,
                                          shard.head_size, s.staged_mpi);
  if (s.pipeline_stages > 1) {
    const bool sp = s.sequence_parallel && shard.size > 1;
    const int64_t message =
        int64_t(s.micro_batch) * s.seq_len / (sp ? shard.size : 1) * shard.cfg.channels * f;
    const int host = s.staged_mpi ? s.messages_in_flight : 0;
    // bf16 messages: an input gradient's fp32 buffer is free once its send is posted (the wire
    // holds it), so the send pool is the one B writes into before its send, right after it.
    const int sends = s.p2p_bf16 ? std::min(s.grad_sends, 1) : s.grad_sends;
    messages += int64_t(sends + s.grad_receives) * message;
    // bf16 messages: a half-size wire buffer for each in flight, and half-size host copies.
    messages +=
        s.p2p_bf16 ? int64_t(s.messages_in_flight + host) * (message / 2) : int64_t(host) * message;
  }
  // An all-reduce in place reduces through a temporary as large as its buffer: one DP bucket at a
  // time, or the tied embedding's gradient (on the stages that hold it).
  const int64_t slab = Parameters::slab_floats(shard, s.dp_cp) * f;
  int64_t reduction = s.dp_cp > 1 ? std::min(s.dp_bucket_bytes, slab) : 0;
  if (s.dp_cp > 1 && s.zero && s.zero_stage >= 2) {
    // ZeRO-2/3 reduce each block as one collective, whatever --dp-bucket-mb; the buckets of the
    // edge tensors hold the rest.
    const int64_t block = largest_block(shard) * f;
    reduction = std::max(block, std::min(s.dp_bucket_bytes, slab - shard.local_layers() * block));
  }
  if (s.tied_across_stages && (shard.has_embedding || shard.has_head)) {
    reduction = std::max(reduction, int64_t(shard.vocab_shard) * shard.cfg.channels * f);
  }
  if (s.reduce_bf16 && s.dp_cp > 1 && !(s.zero && s.zero_stage >= 2)) {
    // --grad-reduce-dtype bf16: the slab's bf16 copy the buckets are reduced in (and under ZeRO
    // the shard's bf16 sums), a device copy of it on a GPU, and MPI's temporary at half the bytes.
    const int64_t copy = slab / 2 + (s.zero ? slab / s.shard_ranks() / 2 : 0);
    reduction = reduction / 2 + copy * (kDeviceMemory ? 2 : 1);
  }
  messages += reduction;
  if (s.tp_bf16 && shard.size > 1) {
    // The TP wire buffer: a microbatch's (rows, C) at 2 bytes, and under SP a reduce-scatter's
    // share of it beside.
    const int64_t rows = int64_t(s.micro_batch) * s.seq_len;
    const bool sp = s.sequence_parallel;
    messages += (rows + (sp ? rows / shard.size : 0)) * shard.cfg.channels * int64_t(sizeof(bf16));
  }
  add("messages", messages,
      "ring attention's blocks, pipeline sends, staged host copies, MPI's reduction buffers",
      "--micro-batch-size");
}

// Workspace: the backward's buffers, recomputation's one-block workspace, bf16's operand copies,
// the attention's tiles.
void add_workspace_terms(const MemoryShape& s, const Terms& add) {
  const TpShard& shard = s.shard;
  ChunkPieces one_block;
  one_block.layers = 1;
  one_block.embedding = one_block.head = false;
  one_block.bf16 = s.bf16;
  // The model alone (ModelStage without backward) holds no backward buffers.
  int64_t work = s.model_only
                     ? 0
                     : BackwardBuffers::bytes(shard, s.micro_batch, s.seq_len, s.sequence_parallel);
  int64_t scratch = 0;  // the sets' one-op scratch, which they share
  for (const ChunkPieces& c : s.chunks) {
    scratch = std::max(scratch, Activations::scratch_bytes(shard, c, s.micro_batch, s.seq_len,
                                                           s.sequence_parallel));
  }
  work += scratch;
  // The multi-token prediction modules' sets and buffers, with the head (model/mtp.hpp).
  // The model alone does not run them (mpiformer-eval scores the trunk's next token).
  if (!s.model_only) {
    work += MtpModules::bytes(shard, s.micro_batch, s.seq_len, s.sequence_parallel, s.bf16);
  }
  if (s.recompute) {
    work += Activations::bytes(shard, one_block, s.micro_batch, s.seq_len, s.sequence_parallel);
  }
  if (s.bf16) work += 2 * s.bf16_scratch * int64_t(sizeof(bf16));
  // W with B: a block's output gradients rounded once for both (gpt_backward_by_block).
  if (s.bf16 && s.weight_with_input && !s.model_only) {
    work += held_output_gradient_elems(shard, int64_t(s.micro_batch) * s.seq_len) *
            int64_t(sizeof(bf16));
  }
  work += attention_path_scratch_bytes(s.attention, shard.heads, shard.kv_heads, shard.head_size,
                                       s.seq_len, s.threads);
  if (s.bf16 && s.attention == AttentionPath::kChunked) {
    work += chunked_attention_bf16_bytes(shard.heads, shard.kv_heads, shard.head_size,
                                         int64_t(s.micro_batch) * s.seq_len, s.cp > 1);
  }
  if (s.bf16 && s.attention == AttentionPath::kFused) {
    work += attention_bf16_bytes(shard.heads, shard.kv_heads, shard.head_size, s.micro_batch,
                                 s.seq_len, s.cp > 1);
  } else if (s.attention == AttentionPath::kFused) {
    work += attention_stored_scores_bytes(shard.heads, shard.kv_heads, shard.head_size,
                                          s.micro_batch, s.seq_len, false, s.cp > 1);
  }
  // A CPU GEMM library packs a whole operand of a large product into a buffer of its own for the
  // call (oneDNN's sgemm: the LM head's vocab x C weight, 8.8 MB for 8192 x 256), and with freed
  // memory kept in the process (core/host_memory.hpp) that buffer stays resident after the call.
  const int64_t widest_weight =
      std::max<int64_t>({shard.has_head ? int64_t(shard.vocab_shard) : 0,
                         int64_t(shard.widest_mlp_in()), int64_t(shard.qkv)});
  if (s.host_gemm_packing && !kDeviceMemory) work += widest_weight * shard.cfg.channels * f;
  add("workspace", work,
      "backward buffers, recomputation, bf16 operands, attention scratch, the GEMM library's "
      "packed weight",
      "--micro-batch-size");
}

}  // namespace

MemoryPlan plan_memory(const MemoryShape& s) {
  MemoryPlan plan;
  const Terms add{plan};
  add_state_terms(s, add);
  add_activation_terms(s, add);
  add_message_terms(s, add);
  add_workspace_terms(s, add);
  add("data", s.data_bytes, "token files, mapped", "");
  add("process", s.process_bytes, "resident before the model: MPI, Kokkos, libraries", "");
  return plan;
}

}  // namespace mpf
