#include "pipeline/model_builder.hpp"

#include <utility>

namespace mpf {

ModelOnLayout build_model(Grid& grid, const GPTConfig& cfg, const StageOwnership* stage, int pad_to,
                          bool gradients, int zero_stage) {
  ModelOnLayout m;
  const TpShard tp = make_tp_shard(cfg, grid.tp_rank(), grid.tp_size());
  m.groups = parallel_groups(grid, tp.kv_replicas);
  m.shard = split_experts(tp, grid.ep_rank(), grid.ep_size());
  if (stage) m.shard = restrict_to_stage(m.shard, stage->layers, stage->embedding, stage->head);
  m.shard.expert_dp_rank = grid.expert_dp_cp_rank();
  m.params = zero_stage == 3 ? Parameters::allocate_sparse_blocks(m.shard, "mpf::params", pad_to)
                             : Parameters::allocate(m.shard, "mpf::params", pad_to);
  if (gradients && zero_stage >= 2) {
    m.grads = Parameters::allocate_sparse_blocks(m.shard, "mpf::grads", pad_to);
  } else if (gradients) {
    m.grads = Parameters::allocate(m.shard, "mpf::grads", pad_to);
  }
  return m;
}

std::unique_ptr<ModelStage> build_stage(const ParallelGroups& groups, const TpShard& shard,
                                        const StageOwnership& stage, const StageSettings& s) {
  std::vector<ChunkPieces> chunks = stage.chunks;
  for (ChunkPieces& c : chunks) {
    c.bf16 = s.bf16;
    c.selective = s.selective;
    c.tp_bf16 = s.tp_bf16;
    c.lent_output = lent_output(c, s.recompute, s.p2p_bf16);
  }
  auto built = std::make_unique<ModelStage>(shard, groups, std::move(chunks), s.micro_batch,
                                            s.seq_len, s.sequence_parallel, s.recompute,
                                            s.placement, s.attention, !s.forward_only);
  built->set_p2p_bf16(s.p2p_bf16);
  return built;
}

}  // namespace mpf
