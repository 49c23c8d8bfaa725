#include "text/tokenizer_document.hpp"

#include <algorithm>
#include <cstdint>

#include "core/error.hpp"
#include "io/json_cursor.hpp"
#include "text/piece_table.hpp"

namespace mpf {

namespace {

class DocumentReader {
 public:
  DocumentReader(std::string_view text, const std::string& origin, TokenizerDocument& d)
      : c_(text, origin), d_(d) {}

  void read() {
    if (c_.peek_value() != '{') {
      d_.doc = c_.value(0);
      c_.finish();
      return;
    }
    c_.enter(0);
    std::vector<json::Value::Member> members;
    std::string key;
    for (bool first = true; c_.member(key, first); first = false) {
      if (key == "model" && c_.peek_value() == '{') {
        members.emplace_back(key, model());
      } else {
        if (key == "model") forget_model();  // the last "model" is the one read
        members.emplace_back(key, c_.value(1));
      }
    }
    c_.finish();
    d_.doc = json::Value::object_value(std::move(members));
  }

 private:
  json::Cursor c_;
  TokenizerDocument& d_;

  void forget_model() {
    d_.has_vocab = d_.has_merges = false;
    d_.vocab.clear();
    d_.merges.clear();
  }

  uint32_t text_size() const { return uint32_t(d_.text.size()); }

  json::Value model() {
    forget_model();
    c_.enter(1);
    std::vector<json::Value::Member> members;
    std::string key;
    // A key given twice keeps its last value: a streamed list drops the member read before it,
    // and a member drops the streamed list.
    const auto drop = [&members](const std::string& name) {
      members.erase(std::remove_if(members.begin(), members.end(),
                                   [&](const json::Value::Member& m) { return m.first == name; }),
                    members.end());
    };
    for (bool first = true; c_.member(key, first); first = false) {
      if (key == "vocab" && c_.peek_value() == '{') {
        drop(key);
        vocab();
      } else if (key == "merges" && c_.peek_value() == '[') {
        drop(key);
        merges();
      } else {
        if (key == "vocab") {
          d_.has_vocab = false;
          d_.vocab.clear();
        } else if (key == "merges") {
          d_.has_merges = false;
          d_.merges.clear();
        }
        members.emplace_back(key, c_.value(2));
      }
    }
    return json::Value::object_value(std::move(members));
  }

  void vocab() {
    d_.has_vocab = true;
    d_.vocab.clear();
    c_.enter(2);
    std::string key;
    for (bool first = true; c_.member(key, first); first = false) {
      TokenizerDocument::VocabMember m{text_size(), uint32_t(key.size()), 0, -1};
      d_.text.append(key);
      const char next = c_.peek_value();
      if (next == '-' || (next >= '0' && next <= '9')) {
        m.number = c_.number();
      } else {
        m.other = int32_t(d_.others.size());
        d_.others.push_back(c_.value(3));
      }
      d_.vocab.push_back(m);
    }
  }

  void merges() {
    d_.has_merges = true;
    d_.merges.clear();
    c_.enter(2);
    for (bool first = true; c_.item(first); first = false) {
      using Form = TokenizerDocument::MergeItem::Form;
      TokenizerDocument::MergeItem m{Form::kString, text_size(), 0, 0, 0, -1};
      const char next = c_.peek_value();
      if (next == '"') {
        c_.string_into(d_.text);
        m.left_size = text_size() - m.left_at;
        d_.merges.push_back(m);
        continue;
      }
      // ["a", "b"]; anything else is read again as a Value.
      const size_t start = c_.offset();
      const size_t text_start = d_.text.size();
      if (next == '[' && pair(m)) {
        d_.merges.push_back(m);
        continue;
      }
      c_.rewind(start);
      d_.text.resize(text_start);
      m.form = Form::kOther;
      m.other = int32_t(d_.others.size());
      d_.others.push_back(c_.value(3));
      d_.merges.push_back(m);
    }
  }

  // Reads ["a", "b"] into m; false (the cursor anywhere in it) when the array is not two strings.
  bool pair(TokenizerDocument::MergeItem& m) {
    c_.enter(3);
    if (!c_.item(true) || c_.peek_value() != '"') return false;
    c_.string_into(d_.text);
    m.left_size = text_size() - m.left_at;
    if (!c_.item(false) || c_.peek_value() != '"') return false;
    m.right_at = text_size();
    c_.string_into(d_.text);
    m.right_size = text_size() - m.right_at;
    if (c_.item(false)) return false;
    m.form = TokenizerDocument::MergeItem::Form::kPair;
    return true;
  }
};

}  // namespace

std::vector<char> TokenizerDocument::repeated_vocab_keys() const {
  const size_t count = vocab.size();
  std::vector<char> repeated(count, 0);
  // A set of the keys' hashes finds the keys that may repeat (a vocabulary has none, or a few):
  // only those are compared, without a table of every key.
  size_t capacity = 1024;
  while (capacity < 2 * count) capacity *= 2;
  std::vector<uint64_t> seen(capacity, 0);  // 0: empty (hash() is never 0)
  std::vector<uint64_t> hashes(count);
  std::vector<uint64_t> twice;  // hashes seen more than once
  for (size_t i = 0; i < count; ++i) {
    const uint64_t h = hashes[i] = PieceTable::hash(at(vocab[i].key_at, vocab[i].key_size));
    size_t slot = size_t(h >> 32) & (capacity - 1);
    while (seen[slot] != 0 && seen[slot] != h) slot = (slot + 1) & (capacity - 1);
    if (seen[slot] == h)
      twice.push_back(h);
    else
      seen[slot] = h;
  }
  if (twice.empty()) return repeated;
  std::sort(twice.begin(), twice.end());
  PieceTable later;  // the keys after i that may repeat, walking back
  for (size_t i = count; i-- > 0;) {
    if (!std::binary_search(twice.begin(), twice.end(), hashes[i])) continue;
    const std::string_view key = at(vocab[i].key_at, vocab[i].key_size);
    const int32_t none = 0;
    if (later.find(key, hashes[i]).size > 0)
      repeated[i] = 1;
    else
      later.insert(key, hashes[i], &none, 1);
  }
  return repeated;
}

TokenizerDocument TokenizerDocument::parse(std::string_view text, const std::string& origin) {
  // Entries hold 32-bit offsets into the decoded text, which is no longer than the file.
  if (text.size() >= UINT32_MAX)
    throw InputError(origin + ": is " + std::to_string(text.size()) +
                     " bytes; a tokenizer.json of 4 GB or more is not supported");
  TokenizerDocument d;
  d.text.reserve(text.size());  // decoded strings are no longer than their JSON
  DocumentReader(text, origin, d).read();
  return d;
}

}  // namespace mpf
