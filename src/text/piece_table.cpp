#include "text/piece_table.hpp"

#include <cstring>

namespace mpf {

uint64_t PieceTable::hash(std::string_view piece) {
  // Eight bytes at a time through a multiply-xorshift mix (SplitMix64's constants).
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t(piece.size()) * 0xFF51AFD7ED558CCDull);
  const char* p = piece.data();
  size_t n = piece.size();
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  if (n > 0) {  // the last 1..7 bytes as two overlapping or three single reads (as wyhash does)
    uint64_t w;
    if (n >= 4) {
      uint32_t a, b;
      std::memcpy(&a, p, 4);
      std::memcpy(&b, p + n - 4, 4);
      w = uint64_t(a) << 32 | b;
    } else {
      w = uint64_t(uint8_t(p[0])) << 16 | uint64_t(uint8_t(p[n / 2])) << 8 | uint8_t(p[n - 1]);
    }
    h = (h ^ w) * 0x94D049BB133111EBull;
    h ^= h >> 29;
  }
  h = (h ^ (h >> 32)) * 0xD6E8FEB86659FD93ull;
  h ^= h >> 32;
  return h | 1;
}

void PieceTable::insert(std::string_view piece, uint64_t h, const int32_t* ids, size_t n) {
  if (2 * (size_ + 1) > slots_.size()) grow();
  Slot slot{h, uint32_t(keys_.size()), uint32_t(piece.size()), uint32_t(ids_.size()), uint32_t(n)};
  keys_.append(piece.data(), piece.size());
  ids_.insert(ids_.end(), ids, ids + n);
  size_t i = index(h);
  while (slots_[i].hash != 0) i = (i + 1) & mask_;
  slots_[i] = slot;
  ++size_;
}

void PieceTable::grow() {
  rehash(slots_.empty() ? 1024 : 2 * slots_.size());
}

void PieceTable::reserve(size_t count) {
  size_t capacity = 1024;
  while (capacity < 2 * count) capacity *= 2;  // a load of at most one half, as insert keeps
  if (capacity > slots_.size()) rehash(capacity);
}

void PieceTable::rehash(size_t capacity) {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(capacity, Slot{0, 0, 0, 0, 0});
  mask_ = capacity - 1;
  for (const Slot& s : old) {
    if (s.hash == 0) continue;
    size_t i = index(s.hash);
    while (slots_[i].hash != 0) i = (i + 1) & mask_;
    slots_[i] = s;
  }
}

void PieceTable::clear() {
  slots_.clear();
  keys_.clear();
  ids_.clear();
  size_ = 0;
  mask_ = 0;
}

}  // namespace mpf
