// Which part of the serial model a tensor-parallel rank holds (Megatron-LM's splits,
// Shoeybi et al. 2019; the split column of model/tensors.hpp):
//   qkvw, qkvb   column-parallel by heads: Q rows of heads [r·NH/T, (r+1)·NH/T), K and V rows of
//                the kv heads those use, kept as a local [Q_r | K_r | V_r]. With grouped-query
//                attention (Llama, KVH < NH) rank r holds kv heads [r·KVH/T, (r+1)·KVH/T) when
//                KVH % T == 0; with fewer kv heads than ranks (T % KVH == 0) each kv head is
//                replicated on the T/KVH ranks whose q heads share it (what Megatron, nanotron
//                and Picotron refuse)
//   attprojw     row-parallel: input columns [r·C/T, (r+1)·C/T)
//   fcw, fcb     column-parallel: rows [r·F/T, (r+1)·F/T) of each block (GPT-2's one block of
//                F = 4C; Llama's [gate | up]; each expert's of a mixture of experts)
//   fcprojw      row-parallel: input columns [r·F/T, (r+1)·F/T) (of each expert's C rows)
//   sfcw, sfcprojw  a shared expert: as fcw and fcprojw (its sgatew replicated)
//   wte, lmhead  vocab-parallel: rows [r·Vp/T, (r+1)·Vp/T), Vp padded to a multiple of 128·T
//   the rest     (LayerNorms, RMSNorms, wpe, attprojb, fcprojb, the router) replicated
// Expert parallelism further splits a mixture of experts' experts (fcw, fcprojw) over the EP
// ranks, each holding E / EP whole experts (each still split over TP as above).
// A pipeline stage further holds only its blocks (any set of layers, in order: with V chunks a
// rank owns V ranges), the embeddings only on the first stage, the final LayerNorm only on the
// last, and wte on both when it is tied (the last stage's LM head reads it; an untied model's
// head is lmhead). Tensors a stage does not hold have size 0.
// global_index() maps a local element to its place in the serial tensor, which is what makes
// initialisation, checkpoint loading and saving independent of the layout (docs/design.md,
// invariant 1).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "model/config.hpp"
#include "model/tensors.hpp"

namespace mpf {

// Sizes and places only: the groups this rank communicates over are parallel/groups.hpp's bundle.
struct TpShard {
  int rank = 0, size = 1;
  GPTConfig cfg;         // the full model
  int heads = 0;         // local heads, NH / T
  int kv_heads = 0;      // local kv heads: KVH / T, or 1 when replicated (KVH < T)
  int kv_begin = 0;      // the first kv head held here
  int kv_replicas = 1;   // ranks holding each kv head (the bundle's kv group): T / KVH, else 1
  int head_size = 0;     // hs
  int attn = 0;          // local width of Q (and of the attention's output): NH·hs / T
  int kv = 0;            // local width of K and of V: kv_heads·hs
  int qkv = 0;           // local rows of qkvw: attn + 2 kv
  int fc = 0;            // local MLP width: F / T
  int mlp_in = 0;        // local rows of fcw: fc (GPT-2), 2 fc (Llama's [gate | up])
  int shared_fc = 0;     // local width of a shared expert (Qwen2-MoE's): Fs / T
  int vocab_padded = 0;  // Vp over all ranks (cfg.padded_vocab when T = 1)
  int vocab_shard = 0;   // local rows of wte: vocab_padded / T
  int vocab_begin = 0;   // first global vocabulary row held here
  // A mixture of experts' experts held here: [expert_begin, expert_begin + experts) of the
  // cfg.experts (all unless split_experts narrowed them), and this rank's place among the ranks
  // holding the same experts (its expert-data-parallel rank, 0 for the one that writes them;
  // set by the model's builder). The EP ranks' group is the groups bundle's ep.
  int ep_rank = 0, ep_size = 1;
  int experts = 0, expert_begin = 0;
  // --moe-a2a-chunks: the groups of local experts whose all-to-alls are pipelined with their
  // products (1: each all-to-all blocks); set by the run.
  int a2a_chunks = 1;
  int expert_dp_rank = 0;
  // Pipeline stage (the whole model unless restrict_to_stage narrowed it):
  std::vector<int> layers;    // global index of each local block, ascending
  bool has_embedding = true;  // wte and wpe (first stage)
  bool has_head = true;       // lnf, and wte (tied) or lmhead for the LM head (last stage)

  int local_layers() const { return int(layers.size()); }
  // A row's values the q/k norms normalise here (its Q and K, attn + kv; 0 without the norms),
  // the 1/rms each keeps (one per head, or Q's and K's over the whole projection) and the weight
  // gradient B computes for W (2·hs shared by the heads, or this rank's slices of both weights).
  int qk_norm_width() const { return cfg.qk_norm() ? attn + kv : 0; }
  int qk_norm_stats() const {
    if (!cfg.qk_norm()) return 0;
    return cfg.qk_norm_kind() == QkNorm::kPerHead ? heads + kv_heads : 2;
  }
  int qk_norm_weight_grad() const {
    if (!cfg.qk_norm()) return 0;
    return cfg.qk_norm_kind() == QkNorm::kPerHead ? 2 * head_size : attn + kv;
  }
  bool holds(TensorId tensor) const;  // does this stage hold any of the tensor?
  // Is the tensor one of the experts' (split over EP; its gradients summed over expert DP)?
  bool is_expert(TensorId tensor) const;
  bool is_tied(TensorId tensor) const;  // held by the embedding and the head both (tied wte)
  // A tied tensor's copy on a stage without the embedding (the LM head's): the first stage's copy
  // is the one checkpoints write and the gradient norm counts.
  bool is_tied_copy(TensorId tensor) const;
  // Of the ranks sharing a replicated kv head, the first is the one that writes its K and V rows
  // and counts them in the gradient norm.
  bool kv_owner() const { return rank % kv_replicas == 0; }
  // Is local element j of the tensor a replicated K or V row this rank does not own?
  bool is_kv_replica(TensorId tensor, int64_t j) const;

  // Local sizes of the tensors.
  PerTensor<int64_t> sizes() const;
  // The shard of block `layer` (global) as its kernels see it: this one, or for a dense block of a
  // model that mixes dense and mixture-of-experts blocks (GPTConfig::mixed) the same with the
  // block's config (block_config) and its MLP width, no experts.
  TpShard block_shard(int layer) const;
  // The most local rows of an MLP's first layer in any block (a mixed model's dense MLP may be
  // wider than an expert's): the widest [gate | up] weight a product reads.
  int widest_mlp_in() const {
    return cfg.mixed() ? std::max(mlp_in, block_shard(0).mlp_in) : mlp_in;
  }
  // Local elements of per-layer tensor `tensor` in block `layer` (0 where the block lacks it).
  int64_t block_size(TensorId tensor, int layer) const;
  // The index, in block `layer`'s slice of the serial tensor, of local element k of that block's
  // slice, for the block's shard (block_shard).
  int64_t index_in_block(TensorId tensor, int64_t k) const;
  // Is the tensor split over the TP ranks (or replicated on each)?
  bool is_split(TensorId tensor) const;
  // The index, in the serial (unpadded for wte) tensor, of local element j of the tensor; -1 for
  // a padded vocabulary row, which holds no parameter.
  int64_t global_index(TensorId tensor, int64_t j) const;

  // A mixed model's dense blocks' shard, made once by make_tp_shard for global_index, which maps
  // every element at initialisation (its sizes and splits do not change after; null: made anew).
  std::shared_ptr<const TpShard> dense_blocks;

 private:
  // One block's local elements (a tensor's that is not per layer: all of them) under this shard.
  int64_t one_block_size(TensorId tensor) const;
  // global_index where every block is alike.
  int64_t uniform_global_index(TensorId tensor, int64_t j, bool within_block = false) const;
};

// A column-split tensor's row block (one layer's slice): `rows` in the serial tensor, of which
// this rank holds `local` from row `first` on.
struct RowBlockSplit {
  int64_t rows = 0, local = 0, first = 0;
};
struct RowBlockSplits {  // at most three, in place (asked for per element), repeated per expert
  std::array<RowBlockSplit, 3> blocks{};
  int count = 0;
  int repeat = 1;
  // Rows of one repeat: in the serial tensor, and held here.
  int64_t pattern_rows() const;
  int64_t pattern_local() const;
  const RowBlockSplit* begin() const { return blocks.data(); }
  const RowBlockSplit* end() const { return blocks.data() + count; }
};
RowBlockSplits row_block_splits(const TpShard& shard, const TensorSpec& spec);

// Throws InputError when the heads (hence the channels and the MLP width) do not divide over the
// tp ranks, or the kv heads neither divide over them nor are shared by whole groups of them.
TpShard make_tp_shard(const GPTConfig& cfg, int rank, int size);
// The same shard with its experts split over `size` EP ranks (this one `rank`); throws InputError
// when they do not divide.
TpShard split_experts(TpShard shard, int rank, int size);
// The same TP shard narrowed to one pipeline stage: `layers` (global, ascending, non-empty unless
// the stage is only embedding or head) and the edge pieces it holds.
TpShard restrict_to_stage(TpShard shard, std::vector<int> layers, bool embedding, bool head);

// A stretch of one tensor that is contiguous both in the shard and in the serial tensor: local
// elements [local, local + length) are serial elements [global, global + length).
struct ShardRun {
  int64_t local = 0, global = 0, length = 0;
  bool replica = false;  // K and V rows of a kv head another rank owns (is_kv_replica)
};
// The runs of the tensor this shard holds, ascending in both indices, merged where they touch;
// padded vocabulary rows (no serial element) are left out. Checkpoint I/O reads and writes a
// shard through these at their serial offsets, so any layout reads what any other wrote.
std::vector<ShardRun> shard_runs(const TpShard& shard, TensorId tensor);

}  // namespace mpf
