#include "text/unicode_classes.hpp"

#include <memory>

#include "text/unicode_text.hpp"

namespace mpf::unicode {

namespace {

CharClass classify(char32_t cp) {
  if (is_letter(cp)) return CharClass::kLetter;
  if (is_numeric(cp)) return CharClass::kNumber;
  if (is_whitespace(cp)) return CharClass::kWhitespace;
  return CharClass::kOther;
}

// Every code point's class, one byte each (1.1 MB), from utf8proc's Unicode data on first use: a
// load, not a search, per character of text.
const CharClass* class_table() {
  static const std::unique_ptr<CharClass[]> table = [] {
    std::unique_ptr<CharClass[]> t(new CharClass[0x110000]);
    for (char32_t cp = 0; cp < 0x110000; ++cp) t[cp] = classify(cp);
    return t;
  }();
  return table.get();
}

}  // namespace

CharClass char_class(char32_t cp) {
  if (cp >= 0x110000) return CharClass::kOther;
  return class_table()[cp];
}

}  // namespace mpf::unicode
