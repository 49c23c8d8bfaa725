// The process grid: world = TP × CP × DP × PP, TP fastest-varying, then CP (Megatron's
// tp-cp-dp-pp order), so a tensor-parallel group is consecutive ranks and stays on a node, and a
// context-parallel group is the next nearest.
//
//   world rank r = tp + n_tp·(cp + n_cp·(dp + n_dp·pp))
//
// (n_tp, n_cp, n_dp, n_pp: the group sizes; T stays the sequence length everywhere.) Worked
// example, 8 ranks as n_tp = 2, n_cp = 1, n_dp = 2, n_pp = 2:
//
//            pp = 0                 pp = 1
//        tp=0    tp=1           tp=0    tp=1
//   dp=0  r0      r1        dp=0  r4      r5
//   dp=1  r2      r3        dp=1  r6      r7
//
//   TP groups {0,1} {2,3} {4,5} {6,7}; DP groups {0,2} {1,3} {4,6} {5,7};
//   PP groups {0,4} {1,5} {2,6} {3,7}; embedding groups (first + last stage) = PP groups here.
//
// With n_cp = 2 and n_dp = 1 instead, ranks 0-3 of stage 0 are (tp 0, cp 0), (tp 1, cp 0),
// (tp 0, cp 1), (tp 1, cp 1): CP groups {0,2} {1,3} {4,6} {5,7}. A CP group's ranks hold the same
// parameters and different parts of each sequence, so the gradients are summed over DP and CP
// together (dp_cp_comm, Megatron's data-parallel group "with context parallel"), and ZeRO-1 shards
// over it; the data's rows are split over DP alone.
//
// Expert parallelism (--ep N) is carved out of DP, as Megatron-LM does: N consecutive DP ranks
// form an EP group (ep rank = dp mod N), whose ranks hold different experts of a mixture of
// experts and exchange tokens with MPI_Alltoallv; the ranks holding the same experts (same tp,
// pp and ep rank) are the expert-data-parallel group, dp / N ranks, times CP. The experts'
// gradients are summed, and ZeRO-1 shards them, over that group; every other gradient over DP x
// CP as before. With 4 DP ranks and N = 2: EP groups {dp 0, 1} {dp 2, 3}, expert-DP groups
// {dp 0, 2} {dp 1, 3}.
//
// The grid is built once with MPI_Comm_split and passed to whatever communicates. Where the ranks
// run, and whether a TP group crosses nodes, is parallel/placement.hpp's.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

namespace mpf {

// A rank's coordinates on the grid.
struct GridCoords {
  int tp = 0, dp = 0, pp = 0, cp = 0;
};
// The rank order above, inverted: the coordinates of world rank r on a grid of
// n_tp x n_cp x n_dp x n_pp.
inline GridCoords grid_coords(int r, int n_tp, int n_dp, int n_cp = 1) {
  return {r % n_tp, (r / (n_tp * n_cp)) % n_dp, r / (n_tp * n_cp * n_dp), (r / n_tp) % n_cp};
}

class Grid {
 public:
  // Throws InputError unless the size of `world` is tp·cp·dp·pp (dp = 0 means world /
  // (tp·cp·pp)) and ep divides dp.
  Grid(MPI_Comm world, int tp, int pp, int dp = 0, int cp = 1, int ep = 1);
  ~Grid();
  Grid(const Grid&) = delete;
  Grid& operator=(const Grid&) = delete;

  MPI_Comm world_comm() const { return world_; }
  MPI_Comm tp_comm() const { return tp_comm_; }
  MPI_Comm dp_comm() const { return dp_comm_; }
  MPI_Comm cp_comm() const { return cp_comm_; }
  // DP and CP together: the ranks that hold the same parameters (gradient sums, ZeRO-1, the
  // loss), ordered by cp + n_cp·dp.
  MPI_Comm dp_cp_comm() const { return dp_cp_comm_; }
  MPI_Comm pp_comm() const { return pp_comm_; }
  // The EP group, ordered by ep rank (one rank without EP), and the ranks holding the same
  // experts, ordered by cp + n_cp·(dp / ep) (dp_cp's ranks without EP).
  MPI_Comm ep_comm() const { return ep_comm_; }
  MPI_Comm expert_dp_cp_comm() const { return expert_dp_cp_comm_; }
  // First and last pipeline stage of the same (tp, dp); MPI_COMM_NULL on the stages between.
  MPI_Comm embedding_comm() const { return embedding_comm_; }
  // The TP ranks that share a replicated kv head (a Llama with fewer kv heads than TP ranks):
  // blocks of `replicas` consecutive TP ranks. Made once, collectively over the TP group, the
  // first time it is asked for; this rank's own communicator under the tp one.
  MPI_Comm kv_group(int replicas);

  int world_rank() const { return world_rank_; }
  int world_size() const { return tp_size_ * cp_size_ * dp_size_ * pp_size_; }
  int tp_rank() const { return tp_rank_; }
  int tp_size() const { return tp_size_; }
  int dp_rank() const { return dp_rank_; }
  int dp_size() const { return dp_size_; }
  int cp_rank() const { return cp_rank_; }
  int cp_size() const { return cp_size_; }
  int ep_rank() const { return dp_rank_ % ep_size_; }
  int ep_size() const { return ep_size_; }
  int expert_dp_cp_rank() const { return cp_rank_ + cp_size_ * (dp_rank_ / ep_size_); }
  int expert_dp_cp_size() const { return cp_size_ * dp_size_ / ep_size_; }
  int dp_cp_rank() const { return cp_rank_ + cp_size_ * dp_rank_; }
  int dp_cp_size() const { return cp_size_ * dp_size_; }
  int pp_rank() const { return pp_rank_; }
  int pp_size() const { return pp_size_; }
  bool pp_is_first_stage() const { return pp_rank_ == 0; }
  bool pp_is_last_stage() const { return pp_rank_ == pp_size_ - 1; }
  // Ranks within pp_comm of the neighbouring stages.
  int pp_next_rank() const { return pp_rank_ + 1; }
  int pp_prev_rank() const { return pp_rank_ - 1; }

  // "world 4 = tp 1 x dp 4 x pp 1 (tp fastest)", with "x cp N" after tp when N > 1 and
  // "(ep N)" after dp when N > 1;
  // parallel/placement.hpp tabulates the ranks.
  std::string describe() const;

 private:
  MPI_Comm world_, tp_comm_ = MPI_COMM_NULL, cp_comm_ = MPI_COMM_NULL, dp_comm_ = MPI_COMM_NULL,
                   dp_cp_comm_ = MPI_COMM_NULL, pp_comm_ = MPI_COMM_NULL,
                   embedding_comm_ = MPI_COMM_NULL, kv_group_ = MPI_COMM_NULL,
                   ep_comm_ = MPI_COMM_NULL, expert_dp_cp_comm_ = MPI_COMM_NULL;
  int ep_size_ = 1;
  int world_rank_ = 0, tp_size_ = 1, cp_size_ = 1, dp_size_ = 1, pp_size_ = 1, tp_rank_ = 0,
      cp_rank_ = 0, dp_rank_ = 0, pp_rank_ = 0;
};

// Sums a host value over comm (returns it at once on a 1-rank communicator). Tensors go through
// parallel/device_mpi.hpp.
double allreduce_sum(double value, MPI_Comm comm);
// `text` as `root` has it, on every rank of comm.
std::string broadcast(const std::string& text, int root, MPI_Comm comm);

}  // namespace mpf
