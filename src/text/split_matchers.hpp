// Hand-written matchers for the Split patterns of DeepSeek V3's and Tekken's (Mistral Nemo's)
// tokenizer.json, each giving the matches Oniguruma gives (leftmost, then the first alternative
// that succeeds, with its backtracking), so a Split step runs them in its place. Classes are
// the general categories of unicode_text.hpp (Unicode 16.0), as regex.hpp spells \p{...} out,
// and \s the White_Space property. tests/text/compare_pipelines.py checks them against
// Oniguruma (the general path) and Python's regex module.
//
// kDigits3:   [0-9][0-9][0-9] (Falcon's; it reads only ASCII bytes, so it may run on the bytes
//             of a ByteLevel step's characters: a byte and its character are the same digit or
//             both no digit)
// kNumbers3:  \p{N}{1,3}
// kKana:      [一-龥぀-ゟ゠-ヿ]+
// kDeepSeek:  [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|
//              ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// kTekken:    [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|
//             [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}|
//              ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace mpf {

enum class SplitMatcher { kDigits3, kNumbers3, kKana, kDeepSeek, kTekken };

// The matcher equal to `pattern` (a Split's Regex as a tokenizer.json writes it, JSON-unescaped;
// \r and \n may be written as the characters themselves, " as \"), if there is one.
std::optional<SplitMatcher> split_matcher(const std::string& pattern);

struct Match {
  size_t begin, end;  // begin == text.size(): no match
};

// The first match in text[from, ...) (text well-formed UTF-8). Matches are never empty.
Match next_match(SplitMatcher m, std::string_view text, size_t from);

}  // namespace mpf
