// Where the ranks run: each rank's host, its place on its node, its grid coordinates, threads and
// GPU, gathered on rank 0 for the start-up table; and the one placement that costs a run dearly,
// a tensor-parallel group spread over nodes (TP all-reduces at every layer).
//
// With TP fastest (grid.hpp) TP group g is the consecutive ranks [g·n_tp, (g+1)·n_tp). Block
// placement puts ranks [s_k, s_k + n_k) on node k, s_k = n_0 + ... + n_(k-1). When every n_k is a
// multiple of n_tp, every node boundary s_k is one too, so no group straddles a boundary: a sane
// allocation (ranks per node a multiple of --tp, block distribution) never spans. Block placement
// with some n_k not a multiple of n_tp puts the first such boundary inside a group, and cyclic
// placement (rank r on node r mod N) puts consecutive ranks on different nodes, so with n_tp > 1
// and N > 1 every group spans. tests/unit/test_placement.cpp checks all three.
//
// Everything but gather_places is pure, so it is tested on made-up host lists.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "parallel/grid.hpp"
#include "parallel/node.hpp"

namespace mpf {

// What a rank says of itself.
struct RankPlace {
  std::string host;
  int local_rank = 0, local_size = 1;  // node_placement's
  int threads = 1;
  int device = -1;  // its GPU; -1: none
};

// One rank of the table: its world rank, where it runs and its coordinates.
struct PlacementRow {
  int rank = 0;
  RankPlace place;
  GridCoords at;
};

// The rows of `places` (world order) on a grid of n_tp x n_cp x n_dp x n_pp. Throws InputError
// unless the places are n_tp·n_cp·n_dp·n_pp.
std::vector<PlacementRow> placement_rows(const std::vector<RankPlace>& places, int n_tp, int n_dp,
                                         int n_pp, int n_cp = 1);

// An inclusive range of values.
struct Span {
  int lo = 0, hi = -1;
  void add(int v);
  std::string text() const;  // "3", "0-7"; "-" for a GPU range of none
};

// One node: its host, its ranks, and the ranges its ranks' coordinates, threads and GPUs take.
struct NodeSummary {
  std::string host;
  std::vector<int> ranks;  // ascending
  Span tp, cp, dp, pp, threads, device;
};

// The nodes in the order of their first rank.
std::vector<NodeSummary> node_summaries(const std::vector<PlacementRow>& rows);

// "0-7", "0-3,8-11", or for long lists the first runs, "..." and the last.
std::string rank_ranges(const std::vector<int>& ranks);

// A TP group whose ranks run on more than one host.
struct SpanningGroup {
  int group = 0;                   // dp + n_dp·pp, as the grid colours it
  int first_rank = 0, n_tp = 1;    // its ranks: [first_rank, first_rank + n_tp)
  std::vector<std::string> hosts;  // in rank order, each once
};
std::vector<SpanningGroup> tp_groups_spanning_nodes(const std::vector<PlacementRow>& rows,
                                                    int n_tp);

// One line (no "warning: " prefix) naming the first spanning group, its hosts, how many span and
// the fix; "" when none spans.
std::string tp_span_warning(const std::vector<SpanningGroup>& spanning, int groups);

// Every rank has a row of its own up to this many ranks: 32 rows (4 nodes of 8 GPUs, one
// 32-core node with a rank per core) fit a screen, each naming its host. A larger job gets a row
// per node instead, with its ranks and coordinate ranges: a 1024-rank job would otherwise log
// 1024 lines before its first step, burying the banner. --dry-run lists every rank.
constexpr int kRowPerRankUpTo = 32;

// The table, each line indented by two spaces: a row per rank ("rank host local tp [cp] pp dp
// threads [gpu]"), or with per_node a row per node ("node host ranks local tp [cp] pp dp threads
// [gpus]"). The cp column appears only with context parallelism, the gpu column only where some
// rank has one.
std::string placement_table(const std::vector<PlacementRow>& rows, bool per_node);

// For the log: "world 4 = tp 2 x dp 2 x pp 1 (tp fastest) | 2 nodes", then the table, a row per
// rank when `every_rank` or the job has at most kRowPerRankUpTo ranks, else a row per node.
std::string describe_placement(const Grid& grid, const std::vector<PlacementRow>& rows,
                               bool every_rank);

// Collective over world: each rank's place (its host from MPI_Get_processor_name), in world
// order on rank 0, empty on the others.
std::vector<RankPlace> gather_places(MPI_Comm world, const NodePlacement& node, int threads,
                                     int device);

}  // namespace mpf
