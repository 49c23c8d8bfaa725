// A flat open-addressing hash table from byte strings (pre-tokens) to short id sequences, its keys
// and values in two arenas: the tokenizer's hot lookups (a pre-token's cached encoding, Llama 3's
// whole-word vocabulary) without a node, a std::string or an allocation per entry.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mpf {

class PieceTable {
 public:
  struct Ids {
    const int32_t* data;
    size_t size;  // 0: absent (every stored sequence has at least one id)
  };

  // The hash find() and insert() take, computed once per piece. Never 0.
  static uint64_t hash(std::string_view piece);

  Ids find(std::string_view piece, uint64_t h) const {
    if (slots_.empty()) return {nullptr, 0};
    for (size_t i = index(h);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.hash == 0) return {nullptr, 0};
      if (s.hash == h && s.key_size == piece.size() &&
          keys_.compare(s.key_at, s.key_size, piece) == 0) {
        return {ids_.data() + s.ids_at, s.ids_size};
      }
    }
  }
  // Stores `piece` (not present yet) with ids[0..n), n >= 1.
  void insert(std::string_view piece, uint64_t h, const int32_t* ids, size_t n);
  size_t size() const { return size_; }
  // Room for `count` pieces without growing.
  void reserve(size_t count);
  void clear();

 private:
  struct Slot {
    uint64_t hash;  // 0: empty
    uint32_t key_at, key_size, ids_at, ids_size;
  };
  size_t index(uint64_t h) const { return size_t(h >> 32) & mask_; }
  void grow();
  void rehash(size_t capacity);

  std::vector<Slot> slots_;
  std::string keys_;
  std::vector<int32_t> ids_;
  size_t size_ = 0, mask_ = 0;
};

}  // namespace mpf
