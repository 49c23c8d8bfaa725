#include "text/merge_table.hpp"

namespace mpf {

void MergeTable::reserve(size_t count) {
  size_t capacity = 16;
  int bits = 4;
  while (capacity < 2 * count) {
    capacity *= 2;
    ++bits;
  }
  if (capacity <= slots_.size()) return;
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(capacity, Slot{kEmpty, {-1, -1}});
  mask_ = capacity - 1;
  shift_ = 64 - bits;
  size_ = 0;
  for (const Slot& s : old) {
    if (s.key != kEmpty) add(int32_t(s.key >> 32), int32_t(uint32_t(s.key)), s.merge);
  }
}

void MergeTable::grow() {
  reserve(slots_.empty() ? 8 : slots_.size());
}

bool MergeTable::add(int32_t left, int32_t right, Merge merge) {
  if (2 * (size_ + 1) > slots_.size()) grow();
  const uint64_t key = pack(left, right);
  for (size_t i = slot_of(key);; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.key == key) return false;
    if (s.key == kEmpty) {
      s = Slot{key, merge};
      ++size_;
      return true;
    }
  }
}

}  // namespace mpf
