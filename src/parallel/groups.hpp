// The run's parallel groups in one bundle: every communicator the model and the step use, made
// once from the grid (grid.hpp) and passed whole to what builds the model
// (pipeline/model_builder.hpp). The model reads its own through a narrow view (ModelGroups): a
// parallel group reaches the model by this one road, never as a positional argument or a
// communicator patched into the shard, which holds sizes only (model/shard.hpp).
//
// The handles are the grid's: it owns and frees them, and outlives every copy of the bundle.
#pragma once

#include <mpi.h>

namespace mpf {

class Grid;

// What the model's layers communicate over beyond the TP collectives of their regions.
struct ModelGroups {
  MPI_Comm tp = MPI_COMM_SELF;
  // The EP ranks, which exchange a mixture of experts' tokens (MPI_COMM_NULL without EP).
  MPI_Comm ep = MPI_COMM_NULL;
  // The TP ranks sharing this rank's replicated kv head (TpShard::kv_replicas > 1), over which
  // the K and V rows' gradients are summed; MPI_COMM_NULL otherwise.
  MPI_Comm kv = MPI_COMM_NULL;
};

struct ParallelGroups {
  MPI_Comm world = MPI_COMM_SELF;
  MPI_Comm tp = MPI_COMM_SELF, cp = MPI_COMM_SELF, dp = MPI_COMM_SELF, pp = MPI_COMM_SELF;
  MPI_Comm dp_cp = MPI_COMM_SELF;  // the ranks holding the same parameters (DP x CP)
  MPI_Comm ep = MPI_COMM_NULL;     // as ModelGroups::ep
  // The ranks holding the same experts (DP x CP's without EP).
  MPI_Comm expert_dp_cp = MPI_COMM_SELF;
  MPI_Comm kv = MPI_COMM_NULL;  // as ModelGroups::kv
  // The first and last pipeline stage of the same (tp, dp); MPI_COMM_NULL on the stages between.
  MPI_Comm embedding = MPI_COMM_NULL;

  ModelGroups model() const { return {tp, ep, kv}; }
};

// The grid's groups. `kv_replicas` (TpShard::kv_replicas, the TP ranks sharing each kv head):
// above 1 the kv group is made, collectively over the TP group.
ParallelGroups parallel_groups(Grid& grid, int kv_replicas);

}  // namespace mpf
