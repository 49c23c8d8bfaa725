#include "text/pre_tokenizer.hpp"

#include <algorithm>
#include <array>

#include "text/unicode_classes.hpp"
#include "text/utf8.hpp"

namespace mpf {

namespace {

using unicode::CharClass;

constexpr std::array<CharClass, 128> ascii_classes() {
  std::array<CharClass, 128> t{};
  for (int c = 0; c < 128; ++c) {
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    const bool space = (c >= '\t' && c <= '\r') || c == ' ';
    t[size_t(c)] = letter                 ? CharClass::kLetter
                   : c >= '0' && c <= '9' ? CharClass::kNumber
                   : space                ? CharClass::kWhitespace
                                          : CharClass::kOther;
  }
  return t;
}
constexpr std::array<CharClass, 128> kAsciiClass = ascii_classes();

struct Scanned {
  char32_t cp;
  CharClass cls;
  int length;
};

inline Scanned scan_char(std::string_view t, size_t at) {
  const unsigned char c = static_cast<unsigned char>(t[at]);
  if (c < 0x80) return {c, kAsciiClass[c], 1};
  const utf8::Char ch = utf8::decode(t, at);
  return {ch.cp, unicode::char_class(ch.cp), ch.length};
}

// The end of the run of characters of class `cls` from `at`.
inline size_t class_run_end(std::string_view t, size_t at, CharClass cls) {
  while (at < t.size()) {
    const Scanned s = scan_char(t, at);
    if (s.cls != cls) break;
    at += size_t(s.length);
  }
  return at;
}

// A run of whitespace from `begin`: its end, the start of its last character and the end of its
// last \r or \n (0 when it has none).
struct SpaceRun {
  size_t end, last, newline_end;
};

inline SpaceRun space_run(std::string_view t, size_t begin) {
  SpaceRun r{begin, begin, 0};
  while (r.end < t.size()) {
    const Scanned s = scan_char(t, r.end);
    if (s.cls != CharClass::kWhitespace) break;
    r.last = r.end;
    r.end += size_t(s.length);
    if (s.cp == '\r' || s.cp == '\n') r.newline_end = r.end;
  }
  return r;
}

// \s+(?!\S)|\s+ from `begin`: the run, less its last character when a non-space follows it and the
// run has more than one character (that character then leads the next piece).
inline size_t trailing_space_end(std::string_view t, const SpaceRun& r, size_t begin) {
  if (r.end == t.size()) return r.end;
  return r.last > begin ? r.last : r.end;
}

bool folds_to(char c, char lower) {
  return c == lower || c == lower - 'a' + 'A';
}

size_t gpt2_end(std::string_view t, size_t i) {
  const size_t n = t.size();
  const Scanned c = scan_char(t, i);
  // 's|'t|'re|'ve|'m|'ll|'d (case-sensitive)
  if (c.cp == '\'' && i + 1 < n) {
    const char a = t[i + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if (i + 2 < n) {
      const char b = t[i + 2];
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    }
  }
  // ' ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+': a run of one class, with at most one space before.
  if (c.cp == ' ' && i + 1 < n) {
    const Scanned d = scan_char(t, i + 1);
    if (d.cls != CharClass::kWhitespace) return class_run_end(t, i + 1 + size_t(d.length), d.cls);
  }
  if (c.cls != CharClass::kWhitespace) return class_run_end(t, i + size_t(c.length), c.cls);
  return trailing_space_end(t, space_run(t, i), i);
}

// Llama 3's rule, numbers in groups of at most `digits`.
size_t llama3_end(std::string_view t, size_t i, int digits) {
  const size_t n = t.size();
  const Scanned c = scan_char(t, i);
  const size_t next = i + size_t(c.length);
  // (?i:'s|'t|'re|'ve|'m|'ll|'d): case folding also takes U+017F LATIN SMALL LETTER LONG S for s.
  if (c.cp == '\'' && next < n) {
    const Scanned d = scan_char(t, next);
    const char32_t a = d.cp;
    if (a == 's' || a == 'S' || a == 0x17F || a == 't' || a == 'T' || a == 'm' || a == 'M' ||
        a == 'd' || a == 'D') {
      return next + size_t(d.length);
    }
    if (i + 2 < n) {
      const char x = t[i + 1], y = t[i + 2];
      if ((folds_to(x, 'r') && folds_to(y, 'e')) || (folds_to(x, 'v') && folds_to(y, 'e')) ||
          (folds_to(x, 'l') && folds_to(y, 'l'))) {
        return i + 3;
      }
    }
  }
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (c.cls == CharClass::kLetter) return class_run_end(t, next, CharClass::kLetter);
  if (c.cls != CharClass::kNumber && c.cp != '\r' && c.cp != '\n' && next < n) {
    const Scanned d = scan_char(t, next);
    if (d.cls == CharClass::kLetter)
      return class_run_end(t, next + size_t(d.length), CharClass::kLetter);
  }
  // \p{N}{1,3}
  if (c.cls == CharClass::kNumber) {
    size_t end = next;
    for (int k = 1; k < digits && end < n; ++k) {
      const Scanned d = scan_char(t, end);
      if (d.cls != CharClass::kNumber) break;
      end += size_t(d.length);
    }
    return end;
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  size_t other = n;  // where the run of "other" starts, n: none
  if (c.cls == CharClass::kOther) {
    other = i;
  } else if (c.cp == ' ' && next < n && scan_char(t, next).cls == CharClass::kOther) {
    other = next;
  }
  if (other < n) {
    size_t end = class_run_end(t, other, CharClass::kOther);
    while (end < n && (t[end] == '\r' || t[end] == '\n')) ++end;
    return end;
  }
  // \s*[\r\n]+: through the run's last newline; else \s+(?!\S)|\s+
  const SpaceRun r = space_run(t, i);
  if (r.newline_end > 0) return r.newline_end;
  return trailing_space_end(t, r, i);
}

}  // namespace

const char* split_pattern(PreTokenizer kind) {
  switch (kind) {
    case PreTokenizer::kGpt2:
      return R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
    case PreTokenizer::kLlama3:
      return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    case PreTokenizer::kQwen2:
      return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  }
  return "";
}

size_t pre_token_end(PreTokenizer kind, std::string_view text, size_t begin) {
  switch (kind) {
    case PreTokenizer::kGpt2:
      return gpt2_end(text, begin);
    case PreTokenizer::kLlama3:
      return llama3_end(text, begin, 3);
    case PreTokenizer::kQwen2:
      return llama3_end(text, begin, 1);
  }
  return text.size();
}

size_t last_safe_cut(std::string_view text, size_t from) {
  if (text.size() < 5) return 0;
  const auto continuation = [&](size_t i) {
    return (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80;
  };
  for (size_t q = text.size() - 4; q >= std::max<size_t>(from, 1); --q) {
    // q must start a character in any decoding: a byte that no sequence before it can hold.
    if (continuation(q) || scan_char(text, q).cls == CharClass::kLetter) continue;
    // The character that ends at q: its first byte is the last non-continuation byte before q,
    // and it must decode to exactly the bytes up to q (else it is ill-formed: not a letter).
    size_t start = q - 1;
    while (start > 0 && q - start < 4 && continuation(start)) --start;
    const Scanned before = scan_char(text, start);
    if (start + size_t(before.length) == q && before.cls == CharClass::kLetter) return q;
  }
  return 0;
}

std::vector<std::string_view> pre_tokenize(PreTokenizer kind, std::string_view text) {
  std::vector<std::string_view> pieces;
  for (size_t at = 0; at < text.size();) {
    const size_t end = pre_token_end(kind, text, at);
    pieces.push_back(text.substr(at, end - at));
    at = end;
  }
  return pieces;
}

}  // namespace mpf
