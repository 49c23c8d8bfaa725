// The placement table and the TP-span check on made-up allocations: block placement with every
// node's rank count a multiple of tp never spreads a TP group over nodes; cyclic placement, or a
// node count that is not a multiple of tp, does, and the warning names it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "parallel/placement.hpp"

namespace mpf {
namespace {

using ::testing::HasSubstr;

// Each rank's place as MPI_Comm_split_type gives it: its index among its host's ranks, in
// world order, and their count.
std::vector<RankPlace> places_on(const std::vector<std::string>& hosts) {
  std::map<std::string, int> count;
  for (const std::string& h : hosts) ++count[h];
  std::map<std::string, int> seen;
  std::vector<RankPlace> places;
  for (const std::string& h : hosts) places.push_back({h, seen[h]++, count[h], 1, -1});
  return places;
}

// Block placement: node k holds the next counts[k] ranks.
std::vector<std::string> block_hosts(const std::vector<int>& counts) {
  std::vector<std::string> hosts;
  for (size_t k = 0; k < counts.size(); ++k) {
    for (int i = 0; i < counts[k]; ++i) hosts.push_back("node" + std::to_string(k));
  }
  return hosts;
}

// Cyclic placement (srun --distribution=cyclic): rank r on node r mod nodes.
std::vector<std::string> cyclic_hosts(int nodes, int world) {
  std::vector<std::string> hosts;
  for (int r = 0; r < world; ++r) hosts.push_back("node" + std::to_string(r % nodes));
  return hosts;
}

struct Layout {
  int tp, dp, pp;
  int world() const { return tp * dp * pp; }
};

std::vector<Layout> layouts() {
  std::vector<Layout> out;
  for (int tp : {1, 2, 4, 8}) {
    for (int dp : {1, 2, 4}) {
      for (int pp : {1, 2, 3}) out.push_back({tp, dp, pp});
    }
  }
  return out;
}

std::vector<PlacementRow> rows_of(const std::vector<std::string>& hosts, const Layout& l) {
  return placement_rows(places_on(hosts), l.tp, l.dp, l.pp);
}

TEST(Placement, RowsCarryTheGridCoordinatesAndTheRanksPlace) {
  for (const Layout& l : layouts()) {
    const std::vector<PlacementRow> rows = rows_of(block_hosts({l.world()}), l);
    ASSERT_EQ(int(rows.size()), l.world());
    std::set<std::vector<int>> seen;
    for (int r = 0; r < l.world(); ++r) {
      const GridCoords c = rows[size_t(r)].at;
      EXPECT_EQ(rows[size_t(r)].rank, r);
      // The grid's rule, read forwards: world rank = tp + n_tp·(dp + n_dp·pp).
      EXPECT_EQ(c.tp + l.tp * (c.dp + l.dp * c.pp), r);
      EXPECT_TRUE(c.tp < l.tp && c.dp < l.dp && c.pp < l.pp);
      EXPECT_TRUE(seen.insert({c.tp, c.dp, c.pp}).second) << "two ranks at one coordinate";
      EXPECT_EQ(rows[size_t(r)].place.local_rank, r);
      EXPECT_EQ(rows[size_t(r)].place.local_size, l.world());
    }
  }
  EXPECT_THROW(placement_rows(places_on(block_hosts({6})), 2, 2, 2), InputError);
}

// With context parallelism: world rank = tp + n_tp·(cp + n_cp·(dp + n_dp·pp)), every coordinate
// once; the table gains a cp column after tp.
TEST(Placement, ContextParallelRanksComeAfterTp) {
  const int n_tp = 2, n_cp = 2, n_dp = 2, n_pp = 2, world = 16;
  const std::vector<PlacementRow> rows =
      placement_rows(places_on(block_hosts({world})), n_tp, n_dp, n_pp, n_cp);
  std::set<std::vector<int>> seen;
  for (int r = 0; r < world; ++r) {
    const GridCoords c = rows[size_t(r)].at;
    EXPECT_EQ(c.tp + n_tp * (c.cp + n_cp * (c.dp + n_dp * c.pp)), r);
    EXPECT_TRUE(seen.insert({c.tp, c.cp, c.dp, c.pp}).second) << "two ranks at one coordinate";
  }
  // A CP group (same tp, dp, pp) is ranks n_tp apart: {0, 2}, {1, 3}, ...
  EXPECT_EQ(rows[2].at.cp, 1);
  EXPECT_EQ(rows[2].at.tp, 0);
  EXPECT_EQ(rows[4].at.dp, 1);
  const std::string table = placement_table(rows, false);
  EXPECT_NE(table.find("tp  cp  pp  dp"), std::string::npos) << table;
  const std::string plain = placement_table(rows_of(block_hosts({4}), {2, 2, 1}), false);
  EXPECT_EQ(plain.find(" cp "), std::string::npos) << plain;
  EXPECT_THROW(placement_rows(places_on(block_hosts({12})), 2, 2, 2, 2), InputError);
}

TEST(Placement, NodeSummariesGiveEachNodesRanksAndCoordinateRanges) {
  // 2 nodes x 4 ranks as tp 2 x dp 2 x pp 2: a pipeline stage per node.
  const std::vector<NodeSummary> two = node_summaries(rows_of(block_hosts({4, 4}), {2, 2, 2}));
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].host, "node0");
  EXPECT_EQ(two[0].ranks, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(two[0].tp.text() + " " + two[0].dp.text() + " " + two[0].pp.text(), "0-1 0-1 0");
  EXPECT_EQ(two[1].ranks, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(two[1].pp.text(), "1");
  EXPECT_EQ(two[1].device.text(), "-");
  // Every layout, blocks and cyclic: the nodes partition the ranks, and each range is the least
  // and greatest coordinate of its node's ranks.
  for (const Layout& l : layouts()) {
    for (int nodes : {1, 2, 3}) {
      for (bool cyclic : {false, true}) {
        const std::vector<std::string> hosts =
            cyclic ? cyclic_hosts(nodes, l.world())
                   : block_hosts(std::vector<int>(size_t(nodes), l.world() / nodes));
        if (int(hosts.size()) != l.world()) continue;
        const std::vector<PlacementRow> rows = rows_of(hosts, l);
        std::vector<int> all;
        for (const NodeSummary& n : node_summaries(rows)) {
          int lo = l.world(), hi = -1;
          for (int r : n.ranks) {
            EXPECT_EQ(hosts[size_t(r)], n.host);
            all.push_back(r);
            lo = std::min(lo, rows[size_t(r)].at.pp);
            hi = std::max(hi, rows[size_t(r)].at.pp);
          }
          EXPECT_EQ(n.pp.lo, lo);
          EXPECT_EQ(n.pp.hi, hi);
        }
        std::sort(all.begin(), all.end());
        for (int r = 0; r < l.world(); ++r) ASSERT_EQ(all[size_t(r)], r);
      }
    }
  }
}

TEST(Placement, RankRangesAreRunsAndLongListsAreCut) {
  EXPECT_EQ(rank_ranges({5}), "5");
  EXPECT_EQ(rank_ranges({0, 1, 2, 3}), "0-3");
  EXPECT_EQ(rank_ranges({0, 1, 2, 3, 8, 9, 10, 11}), "0-3,8-11");
  std::vector<int> even;
  for (int r = 0; r < 64; r += 2) even.push_back(r);
  EXPECT_EQ(rank_ranges(even), "0,2,4,...,62");
}

TEST(Placement, BlocksOfAMultipleOfTpPerNodeNeverSpan) {
  for (const Layout& l : layouts()) {
    for (int nodes : {1, 2, 3, 4, 8}) {
      if (l.world() % nodes) continue;
      const int per_node = l.world() / nodes;
      const std::vector<SpanningGroup> spanning = tp_groups_spanning_nodes(
          rows_of(block_hosts(std::vector<int>(size_t(nodes), per_node)), l), l.tp);
      // A node boundary at a multiple of tp never cuts a group; the first one that is not cuts
      // the group holding it.
      const bool cut = nodes > 1 && per_node % l.tp != 0;
      EXPECT_EQ(!spanning.empty(), cut)
          << "tp " << l.tp << " dp " << l.dp << " pp " << l.pp << " on " << nodes << " nodes";
      if (cut) {
        EXPECT_EQ(spanning.front().first_rank, per_node / l.tp * l.tp);
      }
    }
  }
  // Nodes of different sizes, each a multiple of tp: still no span.
  const Layout l{4, 3, 2};
  EXPECT_TRUE(tp_groups_spanning_nodes(rows_of(block_hosts({8, 4, 12}), l), 4).empty());
  EXPECT_TRUE(tp_groups_spanning_nodes(rows_of(block_hosts({4, 4, 4, 4, 8}), l), 4).empty());
  // One node off by two ranks: the group across its end spans, and those after it too.
  const std::vector<SpanningGroup> off =
      tp_groups_spanning_nodes(rows_of(block_hosts({6, 6, 12}), l), 4);
  ASSERT_FALSE(off.empty());
  EXPECT_EQ(off.front().group, 1);
  EXPECT_EQ(off.front().hosts, (std::vector<std::string>{"node0", "node1"}));
}

TEST(Placement, CyclicPlacementSpreadsEveryTpGroup) {
  for (const Layout& l : layouts()) {
    for (int nodes : {2, 3, 4}) {
      const std::vector<SpanningGroup> spanning =
          tp_groups_spanning_nodes(rows_of(cyclic_hosts(nodes, l.world()), l), l.tp);
      const int groups = l.world() / l.tp;
      EXPECT_EQ(int(spanning.size()), l.tp > 1 ? groups : 0)
          << "tp " << l.tp << " dp " << l.dp << " pp " << l.pp << " on " << nodes << " nodes";
      const std::string warning = tp_span_warning(spanning, groups);
      EXPECT_EQ(warning.empty(), l.tp == 1);
      if (l.tp == 1) continue;
      EXPECT_EQ(int(spanning.front().hosts.size()), std::min(nodes, l.tp));
      EXPECT_THAT(warning, HasSubstr("spans nodes node0, node1"));
      EXPECT_THAT(warning, HasSubstr(std::to_string(groups) + " of " + std::to_string(groups)));
      EXPECT_THAT(warning, HasSubstr("--tp " + std::to_string(l.tp)));
      EXPECT_THAT(warning, HasSubstr("--distribution=block"));
      EXPECT_EQ(warning.find('\n'), std::string::npos);
    }
  }
}

TEST(Placement, TheWarningNamesTheFirstSpanningGroupAndItsRanks) {
  // tp 2 x dp 2 on nodes of 3 ranks: group 1 (ranks 2-3) straddles node0 and node1.
  const std::vector<SpanningGroup> s =
      tp_groups_spanning_nodes(rows_of(block_hosts({3, 1}), {2, 2, 1}), 2);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_THAT(tp_span_warning(s, 2),
              HasSubstr("TP group 1 (ranks 2-3) spans nodes node0, node1 (1 of 2 TP groups"));
}

// The table's rows read back as the rows they print.
std::vector<std::vector<std::string>> fields(const std::string& table) {
  std::vector<std::vector<std::string>> out;
  std::istringstream lines(table);
  for (std::string line; std::getline(lines, line);) {
    EXPECT_EQ(line.rfind("  ", 0), 0u) << line;
    std::istringstream words(line);
    out.emplace_back();
    for (std::string w; words >> w;) out.back().push_back(w);
  }
  return out;
}

TEST(Placement, TableHasARowPerRankOrPerNode) {
  const Layout l{2, 4, 2};
  std::vector<RankPlace> places = places_on(block_hosts({8, 8}));
  for (RankPlace& p : places) p.threads = 3;
  const std::vector<PlacementRow> rows = placement_rows(places, l.tp, l.dp, l.pp);
  const auto ranks = fields(placement_table(rows, false));
  ASSERT_EQ(int(ranks.size()), l.world() + 1);
  EXPECT_EQ(ranks[0],
            (std::vector<std::string>{"rank", "host", "local", "tp", "pp", "dp", "threads"}));
  for (const PlacementRow& r : rows) {
    const std::vector<std::string>& f = ranks[size_t(r.rank) + 1];
    EXPECT_EQ(f,
              (std::vector<std::string>{
                  std::to_string(r.rank), r.place.host,
                  std::to_string(r.place.local_rank) + "/" + std::to_string(r.place.local_size),
                  std::to_string(r.at.tp), std::to_string(r.at.pp), std::to_string(r.at.dp), "3"}));
  }
  const auto nodes = fields(placement_table(rows, true));
  ASSERT_EQ(nodes.size(), 3u);
  EXPECT_EQ(nodes[1], (std::vector<std::string>{"0", "node0", "0-7", "8", "0-1", "0", "0-3", "3"}));
  EXPECT_EQ(nodes[2],
            (std::vector<std::string>{"1", "node1", "8-15", "8", "0-1", "1", "0-3", "3"}));
  // A GPU per rank adds a column.
  for (RankPlace& p : places) p.device = p.local_rank;
  const auto with_gpus = fields(placement_table(placement_rows(places, l.tp, l.dp, l.pp), true));
  EXPECT_EQ(with_gpus[0].back(), "gpus");
  EXPECT_EQ(with_gpus[1].back(), "0-7");
  EXPECT_EQ(fields(placement_table(placement_rows(places, l.tp, l.dp, l.pp), false))[9].back(),
            "0");
}

}  // namespace
}  // namespace mpf
