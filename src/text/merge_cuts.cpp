#include "text/merge_cuts.hpp"

#include <algorithm>

namespace mpf {

namespace {

// The first (or last) leaves a token can have, as a short set. Sets grow past kMaxLeaves only
// in a vocabulary that builds one token many ways; then the cuts are not worth having.
constexpr size_t kMaxLeaves = 16;
constexpr size_t kMaxPasses = 8;

// Adds `from`'s members to `to`; returns whether `to` changed, or false with `overflow` set.
bool add_all(const std::vector<int32_t>& from, std::vector<int32_t>& to, bool& overflow) {
  bool changed = false;
  for (const int32_t x : from) {
    if (std::find(to.begin(), to.end(), x) != to.end()) continue;
    if (to.size() == kMaxLeaves) {
      overflow = true;
      return false;
    }
    to.push_back(x);
    changed = true;
  }
  return changed;
}

}  // namespace

MergeCuts MergeCuts::build(const MergeTable& merges, const std::vector<char>& initial) {
  MergeCuts cuts;
  struct Entry {
    int32_t rank, left, right, merged;
  };
  std::vector<Entry> all;
  all.reserve(merges.size());
  merges.for_each([&](int32_t left, int32_t right, MergeTable::Merge m) {
    all.push_back({m.rank, left, right, m.merged});
  });
  // In rank order one pass usually settles every set: a merge's tokens are made by lower ranks.
  std::sort(all.begin(), all.end(), [](const Entry& a, const Entry& b) { return a.rank < b.rank; });
  const size_t n = initial.size();
  std::vector<std::vector<int32_t>> first(n), last(n);
  for (size_t id = 0; id < n; ++id) {
    if (!initial[id]) continue;
    first[id].push_back(int32_t(id));
    last[id].push_back(int32_t(id));
  }
  const auto known = [n](int32_t id) { return id >= 0 && size_t(id) < n; };
  bool overflow = false;
  for (size_t pass = 0;; ++pass) {
    if (pass == kMaxPasses) return cuts;
    bool changed = false;
    for (const Entry& e : all) {
      if (!known(e.left) || !known(e.right) || !known(e.merged)) return cuts;
      changed |= add_all(first[size_t(e.left)], first[size_t(e.merged)], overflow);
      changed |= add_all(last[size_t(e.right)], last[size_t(e.merged)], overflow);
      if (overflow) return cuts;
    }
    if (!changed) break;
  }
  for (const Entry& e : all) {
    for (const int32_t x : last[size_t(e.left)])
      for (const int32_t y : first[size_t(e.right)]) cuts.pairs_.add(x, y, {0, 0});
  }
  cuts.usable_ = true;
  return cuts;
}

}  // namespace mpf
