// Where BPE's merges can never join two neighbouring symbols, so that a long piece may be merged
// as separate segments with the same result.
//
// Every token that ever covers symbols i..j was built by merges whose leftmost leaf is symbol i
// and rightmost leaf symbol j. So two neighbouring initial symbols x, y can end up in one token
// only if some merge (A, B) has x among the last leaves A can have and y among the first leaves
// B can have. Where no merge has, the merges on either side never meet: each side's merges are
// taken in the same order (rank, then position) as when the side is merged alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "text/merge_table.hpp"

namespace mpf {

class MergeCuts {
 public:
  // `initial[id]`: whether a piece's initial symbols may hold `id` (any superset is sound). Gives
  // up (usable() false) where the sets it builds grow large (then no pair is ever cut).
  static MergeCuts build(const MergeTable& merges, const std::vector<char>& initial);

  bool usable() const { return usable_; }
  // Whether initial symbols `left`, `right` next to each other may end up in one token.
  bool joinable(int32_t left, int32_t right) const {
    return !usable_ || pairs_.find(left, right).rank >= 0;
  }

 private:
  bool usable_ = false;
  MergeTable pairs_;  // the pairs that may join (the merge values unused)
};

}  // namespace mpf
