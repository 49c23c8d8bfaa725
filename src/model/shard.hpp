// Which part of the serial model a tensor-parallel rank holds (Megatron-LM's splits,
// Shoeybi et al. 2019; the split column of model/tensors.hpp):
//   qkvw, qkvb   column-parallel by heads: rows of heads [r·NH/T, (r+1)·NH/T) of each of the Q, K
//                and V blocks, kept as a local [Q_r | K_r | V_r]
//   attprojw     row-parallel: input columns [r·C/T, (r+1)·C/T)
//   fcw, fcb     column-parallel: rows [r·4C/T, (r+1)·4C/T)
//   fcprojw      row-parallel: input columns [r·4C/T, (r+1)·4C/T)
//   wte          vocab-parallel: rows [r·Vp/T, (r+1)·Vp/T), Vp padded to a multiple of 128·T
//   the rest     (LayerNorms, wpe, attprojb, fcprojb) replicated
// A pipeline stage further holds only its blocks (any set of layers, in order: with V chunks a
// rank owns V ranges), the embeddings only on the first stage, the final LayerNorm only on the
// last, and wte on both (tied: the last stage's LM head reads it). Tensors a stage does not hold
// have size 0.
// global_index() maps a local element to its place in the serial tensor, which is what makes
// initialisation, checkpoint loading and saving independent of the layout (docs/design.md,
// invariant 1).
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.hpp"
#include "model/tensors.hpp"

namespace mpf {

struct TpShard {
  int rank = 0, size = 1;
  GPTConfig cfg;         // the full model
  int heads = 0;         // local heads, NH / T
  int attn = 0;          // local width of Q, K and V: C / T
  int fc = 0;            // local fc width: 4C / T
  int vocab_padded = 0;  // Vp over all ranks (cfg.padded_vocab when T = 1)
  int vocab_shard = 0;   // local rows of wte: vocab_padded / T
  int vocab_begin = 0;   // first global vocabulary row held here
  // Pipeline stage (the whole model unless restrict_to_stage narrowed it):
  std::vector<int> layers;    // global index of each local block, ascending
  bool has_embedding = true;  // wte and wpe (first stage)
  bool has_head = true;       // lnf, and wte for the tied LM head (last stage)

  int local_layers() const { return int(layers.size()); }
  bool holds(TensorId tensor) const;  // does this stage hold any of the tensor?
  // A tied tensor's copy on a stage without the embedding (the LM head's): the first stage's copy
  // is the one checkpoints write and the gradient norm counts.
  bool is_tied_copy(TensorId tensor) const;

  // Local sizes of the tensors.
  PerTensor<int64_t> sizes() const;
  // Is the tensor split over the TP ranks (or replicated on each)?
  bool is_split(TensorId tensor) const;
  // The index, in the serial (unpadded for wte) tensor, of local element j of the tensor; -1 for
  // a padded vocabulary row, which holds no parameter.
  int64_t global_index(TensorId tensor, int64_t j) const;
};

// Throws InputError when the heads (hence the channels and the fc width) do not divide over the
// tp ranks.
TpShard make_tp_shard(const GPTConfig& cfg, int rank, int size);
// The same TP shard narrowed to one pipeline stage: `layers` (global, ascending, non-empty unless
// the stage is only embedding or head) and the edge pieces it holds.
TpShard restrict_to_stage(TpShard shard, std::vector<int> layers, bool embedding, bool head);

// A stretch of one tensor that is contiguous both in the shard and in the serial tensor: local
// elements [local, local + length) are serial elements [global, global + length).
struct ShardRun {
  int64_t local = 0, global = 0, length = 0;
};
// The runs of the tensor this shard holds, ascending in both indices, merged where they touch;
// padded vocabulary rows (no serial element) are left out. Checkpoint I/O reads and writes a
// shard through these at their serial offsets, so any layout reads what any other wrote.
std::vector<ShardRun> shard_runs(const TpShard& shard, TensorId tensor);

}  // namespace mpf
