// BPE's merges as a flat open-addressing hash table: (left id, right id) -> (rank, merged id).
// Looked up once or twice per byte encoded, so it avoids std::unordered_map's node per entry.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mpf {

class MergeTable {
 public:
  struct Merge {
    int32_t rank;    // the merge's position in model.merges: lower merges first
    int32_t merged;  // the id of the two tokens' concatenation
  };

  // Room for `count` merges at a load of at most one half.
  void reserve(size_t count);
  // Adds a merge unless the pair has one already (the first listed stays). Returns whether it
  // was added.
  bool add(int32_t left, int32_t right, Merge merge);
  size_t size() const { return size_; }
  // Calls f(left, right, merge) for every merge, in no particular order.
  template <class F>
  void for_each(F&& f) const {
    for (const Slot& s : slots_)
      if (s.key != kEmpty) f(int32_t(s.key >> 32), int32_t(uint32_t(s.key)), s.merge);
  }

  // The pair's merge; rank < 0 when there is none.
  Merge find(int32_t left, int32_t right) const {
    if (slots_.empty()) return {-1, -1};
    const uint64_t key = pack(left, right);
    for (size_t i = slot_of(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return s.merge;
      if (s.key == kEmpty) return {-1, -1};
    }
  }

 private:
  struct Slot {
    uint64_t key;
    Merge merge;
  };
  static constexpr uint64_t kEmpty = ~uint64_t(0);  // ids are non-negative: no pair packs to it

  static uint64_t pack(int32_t left, int32_t right) {
    return uint64_t(uint32_t(left)) << 32 | uint32_t(right);
  }
  size_t slot_of(uint64_t key) const {
    return size_t((key * 0x9E3779B97F4A7C15ull) >> shift_);  // Fibonacci hashing
  }
  void grow();

  std::vector<Slot> slots_;
  size_t mask_ = 0, size_ = 0;
  int shift_ = 64;
};

}  // namespace mpf
