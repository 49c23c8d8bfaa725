#include "parallel/groups.hpp"

#include "parallel/grid.hpp"

namespace mpf {

ParallelGroups parallel_groups(Grid& grid, int kv_replicas) {
  ParallelGroups g;
  g.world = grid.world_comm();
  g.tp = grid.tp_comm();
  g.cp = grid.cp_comm();
  g.dp = grid.dp_comm();
  g.pp = grid.pp_comm();
  g.dp_cp = grid.dp_cp_comm();
  if (grid.ep_size() > 1) g.ep = grid.ep_comm();
  g.expert_dp_cp = grid.expert_dp_cp_comm();
  if (kv_replicas > 1) g.kv = grid.kv_group(kv_replicas);
  g.embedding = grid.embedding_comm();
  return g;
}

}  // namespace mpf
