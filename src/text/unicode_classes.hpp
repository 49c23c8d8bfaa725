// The three Unicode classes the hand-written split scanners name (pre_tokenizer.hpp), as
// Oniguruma (Hugging Face's regex engine) and Python's `regex` module define them: \p{L} (general
// category L*), \p{N} (N*) and \s (the White_Space property), from utf8proc's Unicode data
// (unicode_text.hpp: Unicode 15.0, with 15.1's and 16.0's characters added, as Hugging Face's
// tokenizers read them).
#pragma once

#include <cstdint>

namespace mpf::unicode {

// The classes are disjoint; everything else (punctuation, symbols, emoji, marks, controls,
// unassigned code points, bytes that are not UTF-8) is kOther.
enum class CharClass : uint8_t { kOther, kLetter, kNumber, kWhitespace };

// The class of code point `cp` (any value; above U+10FFFF: kOther). A table lookup, the table
// built on first use.
CharClass char_class(char32_t cp);

}  // namespace mpf::unicode
