#include "parallel/placement.hpp"

#include <algorithm>
#include <cstring>

#include "core/error.hpp"

namespace mpf {

namespace {

// Columns two spaces apart, each line indented by two: text left-aligned, numbers right-aligned.
std::string format_columns(const std::vector<std::vector<std::string>>& lines,
                           const std::vector<bool>& right) {
  std::vector<size_t> width(lines.front().size(), 0);
  for (const auto& line : lines) {
    for (size_t c = 0; c < line.size(); ++c) width[c] = std::max(width[c], line[c].size());
  }
  std::string out;
  for (const auto& line : lines) {
    std::string text;
    for (size_t c = 0; c < line.size(); ++c) {
      const std::string pad(width[c] - line[c].size(), ' ');
      text += "  " + (right[c] ? pad + line[c] : line[c] + (c + 1 < line.size() ? pad : ""));
    }
    out += text + "\n";
  }
  return out;
}

}  // namespace

std::vector<PlacementRow> placement_rows(const std::vector<RankPlace>& places, int n_tp, int n_dp,
                                         int n_pp, int n_cp) {
  require(n_tp > 0 && n_cp > 0 && n_dp > 0 && n_pp > 0 &&
              int64_t(places.size()) == int64_t(n_tp) * n_cp * n_dp * n_pp,
          std::to_string(places.size()) + " ranks are not a grid of tp " + std::to_string(n_tp) +
              (n_cp > 1 ? " x cp " + std::to_string(n_cp) : std::string()) + " x dp " +
              std::to_string(n_dp) + " x pp " + std::to_string(n_pp));
  std::vector<PlacementRow> rows;
  for (int r = 0; r < int(places.size()); ++r) {
    rows.push_back({r, places[size_t(r)], grid_coords(r, n_tp, n_dp, n_cp)});
  }
  return rows;
}

void Span::add(int v) {
  if (hi < lo) {
    lo = hi = v;
  } else {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
}

std::string Span::text() const {
  if (hi < 0) return "-";
  return lo == hi ? std::to_string(lo) : std::to_string(lo) + "-" + std::to_string(hi);
}

std::vector<NodeSummary> node_summaries(const std::vector<PlacementRow>& rows) {
  std::vector<NodeSummary> nodes;
  for (const PlacementRow& row : rows) {
    auto node = std::find_if(nodes.begin(), nodes.end(),
                             [&](const NodeSummary& n) { return n.host == row.place.host; });
    if (node == nodes.end()) {
      nodes.push_back({row.place.host, {}, {}, {}, {}, {}, {}, {}});
      node = nodes.end() - 1;
    }
    node->ranks.push_back(row.rank);
    node->tp.add(row.at.tp);
    node->cp.add(row.at.cp);
    node->dp.add(row.at.dp);
    node->pp.add(row.at.pp);
    node->threads.add(row.place.threads);
    if (row.place.device >= 0) node->device.add(row.place.device);
  }
  for (NodeSummary& n : nodes) std::sort(n.ranks.begin(), n.ranks.end());
  return nodes;
}

std::string rank_ranges(const std::vector<int>& ranks) {
  std::vector<Span> runs;
  for (int r : ranks) {
    if (!runs.empty() && runs.back().hi + 1 == r) {
      runs.back().hi = r;
    } else {
      runs.push_back({r, r});
    }
  }
  // A cyclic placement gives a run per rank: the first few and the last say what it is.
  constexpr size_t kShown = 4;
  std::string text;
  for (size_t i = 0; i < runs.size(); ++i) {
    if (runs.size() > kShown + 1 && i == kShown - 1) {
      text += ",...," + runs.back().text();
      break;
    }
    text += (i ? "," : "") + runs[i].text();
  }
  return text;
}

std::vector<SpanningGroup> tp_groups_spanning_nodes(const std::vector<PlacementRow>& rows,
                                                    int n_tp) {
  std::vector<SpanningGroup> spanning;
  for (size_t first = 0; first + size_t(n_tp) <= rows.size(); first += size_t(n_tp)) {
    SpanningGroup g;
    g.group = int(first) / n_tp;
    g.first_rank = rows[first].rank;
    g.n_tp = n_tp;
    for (size_t r = first; r < first + size_t(n_tp); ++r) {
      const std::string& host = rows[r].place.host;
      if (std::find(g.hosts.begin(), g.hosts.end(), host) == g.hosts.end()) g.hosts.push_back(host);
    }
    if (g.hosts.size() > 1) spanning.push_back(g);
  }
  return spanning;
}

std::string tp_span_warning(const std::vector<SpanningGroup>& spanning, int groups) {
  if (spanning.empty()) return "";
  const SpanningGroup& g = spanning.front();
  std::string hosts;
  for (const std::string& h : g.hosts) hosts += (hosts.empty() ? "" : ", ") + h;
  const std::string tp = std::to_string(g.n_tp);
  return "TP group " + std::to_string(g.group) + " (ranks " + std::to_string(g.first_rank) + "-" +
         std::to_string(g.first_rank + g.n_tp - 1) + ") spans nodes " + hosts + " (" +
         std::to_string(spanning.size()) + " of " + std::to_string(groups) +
         " TP groups span nodes), so its all-reduces at every layer cross the network; give "
         "every node a multiple of --tp " +
         tp +
         " ranks, placed in blocks (srun --ntasks-per-node=N --distribution=block, N a "
         "multiple of " +
         tp + "), or lower --tp";
}

std::string placement_table(const std::vector<PlacementRow>& rows, bool per_node) {
  const bool gpus = std::any_of(rows.begin(), rows.end(),
                                [](const PlacementRow& r) { return r.place.device >= 0; });
  const bool cp =
      std::any_of(rows.begin(), rows.end(), [](const PlacementRow& r) { return r.at.cp > 0; });
  std::vector<std::vector<std::string>> lines;
  std::vector<bool> right;
  // The cp column goes after tp (the grid's order), where there is one.
  auto with_cp = [&](std::vector<std::string> line, const std::string& value) {
    if (cp) line.insert(line.begin() + 4 + (per_node ? 1 : 0), value);
    return line;
  };
  if (per_node) {
    lines.push_back(with_cp({"node", "host", "ranks", "local", "tp", "pp", "dp", "threads"}, "cp"));
    right = {true, false, false, true, false, false, false, true};
    const std::vector<NodeSummary> nodes = node_summaries(rows);
    for (size_t n = 0; n < nodes.size(); ++n) {
      const NodeSummary& s = nodes[n];
      lines.push_back(
          with_cp({std::to_string(n), s.host, rank_ranges(s.ranks), std::to_string(s.ranks.size()),
                   s.tp.text(), s.pp.text(), s.dp.text(), s.threads.text()},
                  s.cp.text()));
      if (gpus) lines.back().push_back(s.device.text());
    }
  } else {
    lines.push_back(with_cp({"rank", "host", "local", "tp", "pp", "dp", "threads"}, "cp"));
    right = {true, false, false, true, true, true, true};
    for (const PlacementRow& r : rows) {
      lines.push_back(
          with_cp({std::to_string(r.rank), r.place.host,
                   std::to_string(r.place.local_rank) + "/" + std::to_string(r.place.local_size),
                   std::to_string(r.at.tp), std::to_string(r.at.pp), std::to_string(r.at.dp),
                   std::to_string(r.place.threads)},
                  std::to_string(r.at.cp)));
      if (gpus) lines.back().push_back(r.place.device >= 0 ? std::to_string(r.place.device) : "-");
    }
  }
  if (cp) right.insert(right.begin() + 4 + (per_node ? 1 : 0), !per_node);
  if (gpus) {
    lines.front().push_back(per_node ? "gpus" : "gpu");
    right.push_back(true);
  }
  return format_columns(lines, right);
}

std::string describe_placement(const Grid& grid, const std::vector<PlacementRow>& rows,
                               bool every_rank) {
  const size_t nodes = node_summaries(rows).size();
  const bool per_node = !every_rank && rows.size() > size_t(kRowPerRankUpTo);
  return grid.describe() + " | " + std::to_string(nodes) + (nodes == 1 ? " node" : " nodes") +
         (per_node ? ", a row each (--dry-run lists every rank)" : "") + "\n" +
         placement_table(rows, per_node);
}

std::vector<RankPlace> gather_places(MPI_Comm world, const NodePlacement& node, int threads,
                                     int device) {
  int rank = 0, size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPF_MPI_CHECK(MPI_Get_processor_name(name, &length));
  const int mine[4] = {node.local_rank, node.local_size, threads, device};
  std::vector<char> names(rank == 0 ? size_t(size) * MPI_MAX_PROCESSOR_NAME : 0);
  std::vector<int> numbers(rank == 0 ? size_t(size) * 4 : 0);
  MPF_MPI_CHECK(MPI_Gather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(),
                           MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, world));
  MPF_MPI_CHECK(MPI_Gather(mine, 4, MPI_INT, numbers.data(), 4, MPI_INT, 0, world));
  std::vector<RankPlace> places;
  if (rank != 0) return places;
  for (int r = 0; r < size; ++r) {
    const char* host = names.data() + size_t(r) * MPI_MAX_PROCESSOR_NAME;
    const int* n = numbers.data() + size_t(r) * 4;
    places.push_back(
        {std::string(host, strnlen(host, MPI_MAX_PROCESSOR_NAME)), n[0], n[1], n[2], n[3]});
  }
  return places;
}

}  // namespace mpf
