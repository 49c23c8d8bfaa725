// UTF-8 as the tokenizer reads it: text is bytes, and a byte that does not begin a well-formed
// character (a stray continuation byte, a truncated or overlong sequence, a surrogate, a value
// above U+10FFFF) is a character of its own, one byte long, of no Unicode class. Byte-level BPE
// encodes every byte, so such text still round-trips.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace mpf::utf8 {

// What an ill-formed byte decodes to: no code point (above U+10FFFF), hence class kOther.
constexpr char32_t kInvalid = 0xFFFFFFFF;

struct Char {
  char32_t cp;  // kInvalid for an ill-formed byte
  int length;   // bytes, 1..4
};

// The character starting at text[at] (at < text.size()).
inline Char decode(std::string_view text, size_t at) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned c0 = b(at);
  if (c0 < 0x80) return {c0, 1};
  const size_t left = text.size() - at;
  const auto cont = [&](size_t i) { return (b(at + i) & 0xC0) == 0x80; };
  if (c0 >= 0xC2 && c0 <= 0xDF && left >= 2 && cont(1)) {
    return {char32_t((c0 & 0x1F) << 6 | (b(at + 1) & 0x3F)), 2};
  }
  if (c0 >= 0xE0 && c0 <= 0xEF && left >= 3 && cont(1) && cont(2)) {
    const char32_t cp = (c0 & 0x0F) << 12 | (b(at + 1) & 0x3F) << 6 | (b(at + 2) & 0x3F);
    if (cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF)) return {cp, 3};
  }
  if (c0 >= 0xF0 && c0 <= 0xF4 && left >= 4 && cont(1) && cont(2) && cont(3)) {
    const char32_t cp =
        (c0 & 0x07) << 18 | (b(at + 1) & 0x3F) << 12 | (b(at + 2) & 0x3F) << 6 | (b(at + 3) & 0x3F);
    if (cp >= 0x10000 && cp <= 0x10FFFF) return {cp, 4};
  }
  return {kInvalid, 1};
}

// Appends code point `cp` (<= U+10FFFF, not a surrogate) as UTF-8.
void append(std::string& out, char32_t cp);

// The length of the well-formed UTF-8 that starts `text` (all of it when it is well formed).
size_t well_formed_prefix(std::string_view text);

// The ill-formed bytes at text[at] (where decode() gives kInvalid) as a lossy decoder replaces
// them with one U+FFFD each (Rust's String::from_utf8_lossy, Python's errors="replace"): the
// maximal subpart, the longest start of a well-formed sequence there, at least one byte (Unicode
// 3.9, "U+FFFD Substitution of Maximal Subparts"). `truncated`: the text ends inside a sequence
// that more bytes could still make well formed.
struct Subpart {
  size_t length;
  bool truncated;
};
Subpart ill_formed_subpart(std::string_view text, size_t at);

}  // namespace mpf::utf8
