// The three Unicode classes the pre-tokenizers' split patterns name (pre_tokenizer.hpp), as
// Python's `regex` module and Rust's regex crates define them: \p{L} (general category L*), \p{N}
// (N*) and \s (the White_Space property). The tables are generated from a Unicode database
// (ci/gen_unicode_classes.py; kUnicodeVersion says which): characters assigned by a later version
// count as neither letter, number nor whitespace here.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mpf::unicode {

// The classes are disjoint; everything else (punctuation, symbols, emoji, marks, controls,
// unassigned code points, bytes that are not UTF-8) is kOther.
enum class CharClass : uint8_t { kOther, kLetter, kNumber, kWhitespace };

struct CodeRange {
  char32_t first, last;  // inclusive
};

// The generated tables (unicode_classes_tables.cpp): sorted, disjoint, not adjacent.
extern const char kUnicodeVersion[];
extern const CodeRange kLetterRanges[];
extern const size_t kLetterRanges_size;
extern const CodeRange kNumberRanges[];
extern const size_t kNumberRanges_size;
extern const CodeRange kWhitespaceRanges[];
extern const size_t kWhitespaceRanges_size;

// The class of code point `cp` (any value; above U+10FFFF: kOther). Constant time below U+10000
// (a table built on first use), a binary search above.
CharClass char_class(char32_t cp);

}  // namespace mpf::unicode
