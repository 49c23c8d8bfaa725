// A tokenizer.json read for loading: a Value for every member but the two that hold most of the
// file, model.vocab and model.merges, which are read straight from the text into flat lists (a
// vocabulary of 128K tokens would otherwise be 128K Values and a string each). Syntax errors are
// json::parse()'s; what the members mean is checked by the loader, as for the rest.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "io/json.hpp"

namespace mpf {

struct TokenizerDocument {
  // The document; "model" lacks "vocab" when it is an object and "merges" when it is an array.
  json::Value doc;

  // Text that entries view by offset: decoded keys and merge strings.
  std::string text;
  std::string_view at(uint32_t offset, uint32_t size) const {
    return std::string_view(text).substr(offset, size);
  }

  // model.vocab's members in order: a key and its value, a number or else others[other].
  struct VocabMember {
    uint32_t key_at, key_size;
    double number;
    int32_t other;  // -1: the value is `number`
  };
  bool has_vocab = false;  // model.vocab is an object (read into `vocab`)
  std::vector<VocabMember> vocab;
  // For each member of `vocab`, whether a later one has the same key.
  std::vector<char> repeated_vocab_keys() const;

  // model.merges' items: a string "a b" (left is the whole string), a pair ["a", "b"], or another
  // value, others[other].
  struct MergeItem {
    enum class Form : uint8_t { kString, kPair, kOther } form;
    uint32_t left_at, left_size, right_at, right_size;
    int32_t other;
  };
  bool has_merges = false;  // model.merges is an array (read into `merges`)
  std::vector<MergeItem> merges;

  std::vector<json::Value> others;

  // Reads `text`; `origin` names it in errors ("tokenizer PATH").
  static TokenizerDocument parse(std::string_view text, const std::string& origin);
};

}  // namespace mpf
