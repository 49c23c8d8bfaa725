// What every schedule table shares: labels, the check of a table, and the table of a schedule.
#include "pipeline/schedule_table.hpp"

#include <set>
#include <tuple>

namespace mpf::pipeline {

std::string node_label(const ComputeNode& n, int virtual_stages) {
  static const char* const kinds[] = {"F", "B", "W", "BW"};
  std::string s = kinds[int(n.kind)] + std::to_string(n.mb);
  if (virtual_stages > 1) s += "c" + std::to_string(n.chunk);
  return s;
}

std::string check_table(const ScheduleTable& table, const PipelineShape& shape) {
  const int P = shape.stages, V = shape.virtual_stages, M = shape.microbatches;
  if (int(table.size()) != P) return "the table has " + std::to_string(table.size()) + " ranks";
  // Each rank: F, B, W of each of its (mb, chunk) exactly once and in that order.
  for (int r = 0; r < P; ++r) {
    std::vector<int> stage(size_t(M) * V, 0);  // 0: nothing, 1: F done, 2: B done, 3: W done
    auto fail = [&](const ComputeNode& n, const std::string& what) {
      return "rank " + std::to_string(r) + ": " + node_label(n, V) + " " + what;
    };
    for (const ComputeNode& n : table[r]) {
      if (n.mb < 0 || n.mb >= M || n.chunk < 0 || n.chunk >= V) {
        return fail(n, "is outside the microbatches and chunks");
      }
      int& s = stage[size_t(n.mb) * V + n.chunk];
      const int want = n.kind == NodeKind::kF ? 0 : n.kind == NodeKind::kW ? 2 : 1;
      if (s != want) return fail(n, s > want ? "runs twice" : "runs before its predecessor");
      s = n.kind == NodeKind::kBW ? 3 : want + 1;
    }
    for (int s : stage) {
      if (s != 3) return "rank " + std::to_string(r) + " leaves a (microbatch, chunk) unfinished";
    }
  }
  // The messages: with every send buffered, each rank can run its list to the end.
  const int S = P * V;
  std::set<std::tuple<int, int, int>> done;  // (kind 0 = F, 1 = B; virtual stage; mb)
  std::vector<size_t> next(P, 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < P; ++r) {
      for (; next[r] < table[r].size(); ++next[r], moved = true) {
        const ComputeNode& n = table[r][next[r]];
        const int s = virtual_stage(shape.placement, P, r, n.chunk);
        if (n.kind == NodeKind::kF && s > 0 && !done.count({0, s - 1, n.mb})) break;
        const bool b = n.kind == NodeKind::kB || n.kind == NodeKind::kBW;
        if (b && s < S - 1 && !done.count({1, s + 1, n.mb})) break;
        if (n.kind == NodeKind::kF) done.insert({0, s, n.mb});
        if (b) done.insert({1, s, n.mb});
      }
    }
  }
  for (int r = 0; r < P; ++r) {
    if (next[r] < table[r].size()) {
      return "rank " + std::to_string(r) + " waits forever before " +
             node_label(table[r][next[r]], V) + " (its input never comes)";
    }
  }
  return "";
}

ScheduleTable schedule_table(Schedule s, const PipelineShape& shape, const OpCosts& costs,
                             int max_in_flight) {
  switch (s) {
    case Schedule::kAfab:
    case Schedule::kOneFOneB:
    case Schedule::kInterleaved:
      return loop_table(s, shape);
    case Schedule::kZbH1:
      return zb_h1_table(shape);
    case Schedule::kZbH2:
      return zb_h2_table(shape);
    case Schedule::kZbV:
      return zb_v_table(shape);
    case Schedule::kZbAuto:
      return zb_auto_table(shape, costs, max_in_flight == 0 ? shape.stages : max_in_flight);
  }
  return {};
}

}  // namespace mpf::pipeline
