// JSON read a value at a time: the reader json::parse() runs, for a caller that reads a large
// object or array member by member into its own compact form instead of a Value each (a
// tokenizer's vocabulary and merges). The same grammar and the same errors as parse():
// "<origin>: invalid JSON at line L, column C: <what>".
#pragma once

#include <string>
#include <string_view>

#include "io/json.hpp"

namespace mpf::json {

class Cursor {
 public:
  // `origin` must outlive the cursor.
  Cursor(std::string_view text, const std::string& origin) : text_(text), origin_(origin) {}

  // The first byte of the next value, past whitespace ('{', '[', '"', 't', a digit, ...); '\0' at
  // the end of the text.
  char peek_value() {
    skip_space();
    return peek();
  }
  // The next value whole, at nesting `depth` (the document's own value is 0).
  Value value(int depth);
  // The next value, a string: appended to `out` (decoded).
  void string_into(std::string& out);
  // The next value, a number.
  double number();

  // An object read a member at a time: enter at its '{' (peek_value() == '{'), then member()
  // until it returns false, reading each member's value before the next call.
  void enter(int depth);
  // The next member's key into `key` (replaced), the cursor then at its value; false at the
  // object's end. `first`: no member has been read yet.
  bool member(std::string& key, bool first);
  // An array the same way: enter() at its '[', then item() until false.
  bool item(bool first);

  // The end of the document: only whitespace may follow.
  void finish();

  // Where the cursor is, to read a value again another way.
  size_t offset() const { return at_; }
  void rewind(size_t offset) { at_ = offset; }

 private:
  [[noreturn]] void fail(const std::string& what) const;
  bool more() const { return at_ < text_.size(); }
  char peek() const { return more() ? text_[at_] : '\0'; }
  void skip_space() {
    while (more()) {
      const char c = text_[at_];
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
      ++at_;
    }
  }
  void expect(char c);
  void literal(std::string_view word);
  Value object(int depth);
  Value array(int depth);
  unsigned hex4();

  std::string_view text_;
  const std::string& origin_;
  size_t at_ = 0;
};

}  // namespace mpf::json
