#include "text/utf8.hpp"

#include <cstdint>
#include <cstring>

namespace mpf::utf8 {

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | cp >> 6);
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | cp >> 12);
    out += char(0x80 | (cp >> 6 & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | cp >> 18);
    out += char(0x80 | (cp >> 12 & 0x3F));
    out += char(0x80 | (cp >> 6 & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

size_t well_formed_prefix(std::string_view text) {
  size_t at = 0;
  while (at < text.size()) {
    // Eight ASCII bytes at a time.
    uint64_t word;
    if (at + 8 <= text.size() &&
        (std::memcpy(&word, text.data() + at, 8), (word & 0x8080808080808080ull) == 0)) {
      at += 8;
      continue;
    }
    if (static_cast<unsigned char>(text[at]) < 0x80) {
      ++at;
      continue;
    }
    const Char c = decode(text, at);
    if (c.cp == kInvalid) break;
    at += size_t(c.length);
  }
  return at;
}

Subpart ill_formed_subpart(std::string_view text, size_t at) {
  const unsigned c0 = static_cast<unsigned char>(text[at]);
  // The continuation bytes a lead byte takes, and the range of the first (Table 3-7).
  size_t need = 0;
  unsigned lo = 0x80, hi = 0xBF;
  if (c0 >= 0xC2 && c0 <= 0xDF) {
    need = 1;
  } else if (c0 >= 0xE0 && c0 <= 0xEF) {
    need = 2;
    if (c0 == 0xE0) lo = 0xA0;
    if (c0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (c0 >= 0xF0 && c0 <= 0xF4) {
    need = 3;
    if (c0 == 0xF0) lo = 0x90;
    if (c0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  }
  size_t n = 1;
  for (; n <= need; ++n) {
    if (at + n == text.size()) return {n, true};
    const unsigned c = static_cast<unsigned char>(text[at + n]);
    if (c < lo || c > hi) break;
    lo = 0x80;
    hi = 0xBF;
  }
  return {n, false};
}

}  // namespace mpf::utf8
