// One model on a layout: the one road from the process grid to the model, which training,
// evaluation and generation take alike (docs/design.md): the grid -> the run's groups bundle
// (parallel/groups.hpp), passed whole -> this rank's shard, which holds sizes only
// (model/shard.hpp) -> its parameters (and, only when training, a slab of their gradients) -> its
// pipeline stage (model_stage.hpp). Nothing patches a communicator in afterwards.
#pragma once

#include <memory>
#include <vector>

#include "model/config.hpp"
#include "model/layers/attention_path.hpp"
#include "model/parameters.hpp"
#include "model/shard.hpp"
#include "parallel/grid.hpp"
#include "parallel/groups.hpp"
#include "pipeline/layer_ownership.hpp"
#include "pipeline/model_stage.hpp"

namespace mpf {

struct ModelOnLayout {
  ParallelGroups groups;
  TpShard shard;
  Parameters params;
  Parameters grads;  // empty unless asked for (training)
};

// Collective over the grid's TP group when the config replicates kv heads (the kv group is made).
// stage: this rank's pipeline stage (stage_ownership), or null for the whole model (no PP).
// pad_to: the slabs padded to a multiple of it (ZeRO's buckets split evenly over DP x CP).
// gradients: allocate the gradients' slab too. zero_stage 2 or 3: the gradients' (and under 3
// the parameters') blocks' stretch is left unwritten (Parameters::allocate_sparse_blocks).
ModelOnLayout build_model(Grid& grid, const GPTConfig& cfg, const StageOwnership* stage,
                          int pad_to = 1, bool gradients = false, int zero_stage = 0);

// What a stage runs with beyond its shard and groups (the run's flags).
struct StageSettings {
  int micro_batch = 1, seq_len = 1;  // seq_len: the rows of each sequence this rank holds
  bool sequence_parallel = false, recompute = false;
  bool selective = false;  // --recompute selective: the chunks keep what is costly to form again
  bool bf16 = false;       // bf16 products: the chunks keep what only products read in bf16
  bool p2p_bf16 = false;   // --p2p-dtype bf16: messages between stages in bf16
  bool tp_bf16 = false;    // --tp-comm-dtype bf16: the TP regions' collectives in bf16
  pipeline::ChunkPlacement placement = pipeline::ChunkPlacement::kLooped;
  AttentionPath attention = AttentionPath::kFused;
  // The model alone (mpiformer-eval): the forward only, no backward buffers (no W inputs are
  // taken either: they are taken by B).
  bool forward_only = false;
};

// The stage of a model build_model built: `stage` as it was given to it.
std::unique_ptr<ModelStage> build_stage(const ParallelGroups& groups, const TpShard& shard,
                                        const StageOwnership& stage, const StageSettings& settings);

}  // namespace mpf
