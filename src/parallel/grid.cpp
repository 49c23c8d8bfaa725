#include "parallel/grid.hpp"

#include <climits>
#include <cstdio>
#include <vector>

#include "core/error.hpp"
#include "parallel/rank_activity.hpp"

namespace mpf {

Grid::Grid(MPI_Comm world, int tp, int pp, int dp, int cp, int ep) : world_(world) {
  int size = 0;
  MPI_Comm_rank(world, &world_rank_);
  MPI_Comm_size(world, &size);
  require(tp > 0 && pp > 0 && cp > 0 && ep > 0 && dp >= 0,
          "--tp, --cp, --ep and --pp must be positive and --dp non-negative");
  const std::string model_axes = "tp " + std::to_string(tp) +
                                 (cp > 1 ? " x cp " + std::to_string(cp) : std::string()) +
                                 " x pp " + std::to_string(pp);
  if (dp == 0) {
    require(size % (tp * cp * pp) == 0, std::to_string(size) + " ranks do not divide into " +
                                            model_axes + "; launch a multiple of " +
                                            (cp > 1 ? "tp*cp*pp" : "tp*pp") + " ranks");
    dp = size / (tp * cp * pp);
  }
  require(tp * cp * pp * dp == size,
          "the layout tp " + std::to_string(tp) +
              (cp > 1 ? " x cp " + std::to_string(cp) : std::string()) + " x dp " +
              std::to_string(dp) + " x pp " + std::to_string(pp) + " needs " +
              std::to_string(tp * cp * pp * dp) + " ranks, but " + std::to_string(size) +
              " were launched; change the layout or mpiexec -n");
  require(dp % ep == 0, "--ep " + std::to_string(ep) + " does not divide the " +
                            std::to_string(dp) +
                            " data-parallel ranks it is carved out of; choose an --ep that "
                            "divides dp (world / (tp*cp*pp))");
  ep_size_ = ep;
  tp_size_ = tp;
  cp_size_ = cp;
  dp_size_ = dp;
  pp_size_ = pp;
  const GridCoords at = grid_coords(world_rank_, tp, dp, cp);
  tp_rank_ = at.tp;
  cp_rank_ = at.cp;
  dp_rank_ = at.dp;
  pp_rank_ = at.pp;
  // Colours name the group (the other coordinates), keys order ranks inside it.
  const int others_of_tp = cp_rank_ + cp * (dp_rank_ + dp * pp_rank_);
  const int others_of_cp = tp_rank_ + tp * (dp_rank_ + dp * pp_rank_);
  const int others_of_dp = tp_rank_ + tp * (cp_rank_ + cp * pp_rank_);
  const int others_of_pp = tp_rank_ + tp * (cp_rank_ + cp * dp_rank_);
  MPF_MPI_CHECK(MPI_Comm_split(world, others_of_tp, tp_rank_, &tp_comm_));
  MPF_MPI_CHECK(MPI_Comm_split(world, others_of_cp, cp_rank_, &cp_comm_));
  MPF_MPI_CHECK(MPI_Comm_split(world, others_of_dp, dp_rank_, &dp_comm_));
  MPF_MPI_CHECK(MPI_Comm_split(world, tp_rank_ + tp * pp_rank_, dp_cp_rank(), &dp_cp_comm_));
  MPF_MPI_CHECK(MPI_Comm_split(world, others_of_pp, pp_rank_, &pp_comm_));
  // EP: the consecutive DP ranks dp / ep of one (tp, cp, pp); expert DP: the same ep rank.
  const int ep_group = dp_rank_ / ep;
  MPF_MPI_CHECK(MPI_Comm_split(world,
                               tp_rank_ + tp * (cp_rank_ + cp * (ep_group + (dp / ep) * pp_rank_)),
                               ep_rank(), &ep_comm_));
  MPF_MPI_CHECK(MPI_Comm_split(world, tp_rank_ + tp * (ep_rank() + ep * pp_rank_),
                               expert_dp_cp_rank(), &expert_dp_cp_comm_));
  const bool holds_embedding = pp_is_first_stage() || pp_is_last_stage();
  MPF_MPI_CHECK(MPI_Comm_split(world, holds_embedding ? others_of_pp : MPI_UNDEFINED, pp_rank_,
                               &embedding_comm_));
  // The names a hung rank's record gives its MPI call (rank_activity.hpp), as the flags say them.
  name_communicator(world_, "world");
  name_communicator(tp_comm_, "tp");
  name_communicator(cp_comm_, "cp");
  name_communicator(dp_comm_, "dp");
  name_communicator(dp_cp_comm_, "dp_cp");
  name_communicator(pp_comm_, "pp");
  name_communicator(ep_comm_, "ep");
  name_communicator(expert_dp_cp_comm_, "expert_dp_cp");
  name_communicator(embedding_comm_, "embedding");
}

Grid::~Grid() {
  for (MPI_Comm* c : {&tp_comm_, &cp_comm_, &dp_comm_, &dp_cp_comm_, &pp_comm_, &embedding_comm_,
                      &kv_group_, &ep_comm_, &expert_dp_cp_comm_}) {
    forget_communicator(*c);
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
  }
}

MPI_Comm Grid::kv_group(int replicas) {
  if (kv_group_ == MPI_COMM_NULL) {
    MPF_MPI_CHECK(MPI_Comm_split(tp_comm_, tp_rank_ / replicas, tp_rank_, &kv_group_));
    name_communicator(kv_group_, "kv_group");
  }
  return kv_group_;
}

std::string Grid::describe() const {
  char buf[128];
  const std::string dp = std::to_string(dp_size_) +
                         (ep_size_ > 1 ? " (ep " + std::to_string(ep_size_) + ")" : std::string());
  if (cp_size_ > 1) {
    std::snprintf(buf, sizeof buf, "world %d = tp %d x cp %d x dp %s x pp %d (tp fastest)",
                  world_size(), tp_size_, cp_size_, dp.c_str(), pp_size_);
  } else {
    std::snprintf(buf, sizeof buf, "world %d = tp %d x dp %s x pp %d (tp fastest)", world_size(),
                  tp_size_, dp.c_str(), pp_size_);
  }
  return buf;
}

double allreduce_sum(double value, MPI_Comm comm) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  if (size == 1) return value;
  MpiCallScope in_mpi("MPI_Allreduce", comm);
  double total = 0.0;
  MPF_MPI_CHECK(MPI_Allreduce(&value, &total, 1, MPI_DOUBLE, MPI_SUM, comm));
  return total;
}

std::string broadcast(const std::string& text, int root, MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  int length = rank == root ? static_cast<int>(text.size()) : 0;
  MPF_MPI_CHECK(MPI_Bcast(&length, 1, MPI_INT, root, comm));
  std::string out = rank == root ? text : std::string(size_t(length), ' ');
  MPF_MPI_CHECK(MPI_Bcast(out.data(), length, MPI_CHAR, root, comm));
  return out;
}

}  // namespace mpf
