#include "text/unicode_classes.hpp"

#include <algorithm>
#include <array>

namespace mpf::unicode {

namespace {

bool in_ranges(const CodeRange* ranges, size_t n, char32_t cp) {
  const CodeRange* end = ranges + n;
  const CodeRange* it =
      std::upper_bound(ranges, end, cp, [](char32_t c, const CodeRange& r) { return c < r.first; });
  return it != ranges && cp <= (it - 1)->last;
}

CharClass search_class(char32_t cp) {
  if (in_ranges(kLetterRanges, kLetterRanges_size, cp)) return CharClass::kLetter;
  if (in_ranges(kNumberRanges, kNumberRanges_size, cp)) return CharClass::kNumber;
  if (in_ranges(kWhitespaceRanges, kWhitespaceRanges_size, cp)) return CharClass::kWhitespace;
  return CharClass::kOther;
}

// The Basic Multilingual Plane, where nearly all text lies, one byte per code point (64 KiB).
using BmpTable = std::array<CharClass, 0x10000>;

const BmpTable& bmp_table() {
  static const BmpTable table = [] {
    BmpTable t;
    for (char32_t cp = 0; cp < 0x10000; ++cp) t[cp] = search_class(cp);
    return t;
  }();
  return table;
}

}  // namespace

CharClass char_class(char32_t cp) {
  if (cp < 0x10000) return bmp_table()[cp];
  return search_class(cp);
}

}  // namespace mpf::unicode
