#include "text/split_matchers.hpp"

#include <array>
#include <vector>

#include "text/unicode_text.hpp"
#include "text/utf8.hpp"

namespace mpf {

namespace {

using unicode::Category;

constexpr size_t kNone = ~size_t(0);

struct Ch {
  char32_t cp;
  Category cat;
  size_t length;
};

Ch char_at(std::string_view t, size_t i) {
  static const std::array<Category, 128> ascii = [] {
    std::array<Category, 128> a{};
    for (char32_t c = 0; c < 128; ++c) a[c] = unicode::general_category(c);
    return a;
  }();
  const unsigned char b = static_cast<unsigned char>(t[i]);
  if (b < 0x80) return {b, ascii[b], 1};
  const utf8::Char c = utf8::decode(t, i);
  return {c.cp, unicode::general_category(c.cp), size_t(c.length)};
}

bool in(Category c, Category first, Category last) {
  return c >= first && c <= last;
}
bool is_l(const Ch& c) {
  return in(c.cat, Category::kLu, Category::kLo);
}
bool is_m(const Ch& c) {
  return in(c.cat, Category::kMn, Category::kMe);
}
bool is_n(const Ch& c) {
  return in(c.cat, Category::kNd, Category::kNo);
}
bool is_p(const Ch& c) {
  return in(c.cat, Category::kPc, Category::kPo);
}
bool is_s(const Ch& c) {
  return in(c.cat, Category::kSm, Category::kSo);
}
bool is_space(const Ch& c) {
  return c.cp < 0x80 ? c.cp == ' ' || (c.cp >= '\t' && c.cp <= '\r') : unicode::is_whitespace(c.cp);
}
bool is_newline(char32_t cp) {
  return cp == '\r' || cp == '\n';
}
// [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and [\p{Ll}\p{Lm}\p{Lo}\p{M}] (Tekken's upper and lower).
bool is_upper(const Ch& c) {
  return c.cat == Category::kLu || c.cat == Category::kLt || c.cat == Category::kLm ||
         c.cat == Category::kLo || is_m(c);
}
bool is_lower(const Ch& c) {
  return c.cat == Category::kLl || c.cat == Category::kLm || c.cat == Category::kLo || is_m(c);
}

// The end of the run of characters `pred` holds for, from `at`.
template <class Pred>
size_t run_end(std::string_view t, size_t at, Pred pred) {
  while (at < t.size()) {
    const Ch c = char_at(t, at);
    if (!pred(c)) break;
    at += c.length;
  }
  return at;
}

// \s*[\r\n]+|\s+(?!\S)|\s+ at i: through the run's last \r or \n; else the run, less its last
// character when a non-space follows and the run has more than one. kNone: no space at i.
size_t space_end(std::string_view t, size_t i) {
  size_t end = i, last = i, newline_end = 0;
  while (end < t.size()) {
    const Ch c = char_at(t, end);
    if (!is_space(c)) break;
    last = end;
    end += c.length;
    if (is_newline(c.cp)) newline_end = end;
  }
  if (end == i) return kNone;
  if (newline_end > 0) return newline_end;
  if (end == t.size()) return end;
  return last > i ? last : end;
}

size_t newlines_end(std::string_view t, size_t at, bool slash) {
  while (at < t.size() && (t[at] == '\r' || t[at] == '\n' || (slash && t[at] == '/'))) ++at;
  return at;
}

bool ascii_letter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
bool ascii_punct(char32_t c) {
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
         (c >= 0x7B && c <= 0x7E);
}

size_t deepseek_at(std::string_view t, size_t i) {
  const size_t n = t.size();
  const Ch c0 = char_at(t, i);
  const size_t next = i + c0.length;
  // [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+
  if (ascii_punct(c0.cp) && next < n && ascii_letter(t[next])) {
    size_t e = next;
    while (e < n && ascii_letter(t[e])) ++e;
    return e;
  }
  // [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+: with the character before if it may be, else without.
  const auto letter_or_mark = [](const Ch& c) { return is_l(c) || is_m(c); };
  if (!is_newline(c0.cp) && !is_l(c0) && !is_p(c0) && !is_s(c0) && next < n &&
      letter_or_mark(char_at(t, next)))
    return run_end(t, next, letter_or_mark);
  if (letter_or_mark(c0)) return run_end(t, i, letter_or_mark);
  //  ?[\p{P}\p{S}]+[\r\n]*
  const auto punct_or_symbol = [](const Ch& c) { return is_p(c) || is_s(c); };
  if (c0.cp == ' ' && next < n && punct_or_symbol(char_at(t, next)))
    return newlines_end(t, run_end(t, next, punct_or_symbol), false);
  if (punct_or_symbol(c0)) return newlines_end(t, run_end(t, i, punct_or_symbol), false);
  return space_end(t, i);
}

// Tekken's first alternative after its optional first character, from s: a run of upper
// (greedy, given back a character at a time) then a run of lower. kNone: no match.
size_t tekken_upper_lower(std::string_view t, size_t s) {
  thread_local std::vector<size_t> starts;  // where each upper character of the run begins
  starts.clear();
  size_t at = s;
  while (at < t.size()) {
    const Ch c = char_at(t, at);
    if (!is_upper(c)) break;
    starts.push_back(at);
    at += c.length;
  }
  if (at < t.size() && is_lower(char_at(t, at))) return run_end(t, at, is_lower);
  for (size_t j = starts.size(); j-- > 0;) {
    if (is_lower(char_at(t, starts[j]))) return run_end(t, starts[j], is_lower);
  }
  return kNone;
}

size_t tekken_at(std::string_view t, size_t i) {
  const size_t n = t.size();
  const Ch c0 = char_at(t, i);
  const size_t next = i + c0.length;
  const bool lead = !is_newline(c0.cp) && !is_l(c0) && !is_n(c0);  // [^\r\n\p{L}\p{N}]
  // [^\r\n\p{L}\p{N}]?[upper]*[lower]+
  if (lead && next < n) {
    const size_t e = tekken_upper_lower(t, next);
    if (e != kNone) return e;
  }
  if (const size_t e = tekken_upper_lower(t, i); e != kNone) return e;
  // [^\r\n\p{L}\p{N}]?[upper]+[lower]*
  if (lead && next < n) {
    const size_t u = run_end(t, next, is_upper);
    if (u > next) return run_end(t, u, is_lower);
  }
  if (const size_t u = run_end(t, i, is_upper); u > i) return run_end(t, u, is_lower);
  // \p{N}
  if (is_n(c0)) return next;
  //  ?[^\s\p{L}\p{N}]+[\r\n/]*
  const auto other = [](const Ch& c) { return !is_space(c) && !is_l(c) && !is_n(c); };
  if (c0.cp == ' ' && next < n && other(char_at(t, next)))
    return newlines_end(t, run_end(t, next, other), true);
  if (other(c0)) return newlines_end(t, run_end(t, i, other), true);
  return space_end(t, i);
}

bool is_kana(const Ch& c) {
  return (c.cp >= 0x4E00 && c.cp <= 0x9FA5) || (c.cp >= 0x3040 && c.cp <= 0x30FF);
}

// `pattern` with \" written ", and a carriage return or newline character as \r, \n: the same
// pattern to Oniguruma, in one spelling.
std::string canonical(const std::string& pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      if (pattern[i + 1] != '"') out += c;
      out += pattern[++i];
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::optional<SplitMatcher> split_matcher(const std::string& pattern) {
  const std::string p = canonical(pattern);
  if (p == "[0-9][0-9][0-9]") return SplitMatcher::kDigits3;
  if (p == R"(\p{N}{1,3})") return SplitMatcher::kNumbers3;
  if (p == "[\xE4\xB8\x80-\xE9\xBE\xA5\xE3\x81\x80-\xE3\x82\x9F\xE3\x82\xA0-\xE3\x83\xBF]+")
    return SplitMatcher::kKana;
  if (p ==
      R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re")
    return SplitMatcher::kDeepSeek;
  if (p ==
      R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re")
    return SplitMatcher::kTekken;
  return std::nullopt;
}

Match next_match(SplitMatcher m, std::string_view text, size_t from) {
  const size_t n = text.size();
  if (m == SplitMatcher::kDigits3) {  // a byte at a time: a match starts at an ASCII digit
    const auto digit = [&](size_t i) { return text[i] >= '0' && text[i] <= '9'; };
    for (size_t i = from; i + 3 <= n; ++i)
      if (digit(i) && digit(i + 1) && digit(i + 2)) return {i, i + 3};
    return {n, n};
  }
  // ASCII holds no kana, and no number but 0-9: those bytes are passed over without a lookup.
  const bool ascii_digits_only = m == SplitMatcher::kKana || m == SplitMatcher::kNumbers3;
  for (size_t i = from; i < n;) {
    const unsigned char b = static_cast<unsigned char>(text[i]);
    if (ascii_digits_only && b < 0x80 && (m == SplitMatcher::kKana || b < '0' || b > '9')) {
      ++i;
      continue;
    }
    const Ch c = char_at(text, i);
    switch (m) {
      case SplitMatcher::kDigits3:
        break;  // above
      case SplitMatcher::kNumbers3:
        if (is_n(c)) {
          size_t e = i + c.length;
          for (int k = 1; k < 3 && e < n; ++k) {
            const Ch d = char_at(text, e);
            if (!is_n(d)) break;
            e += d.length;
          }
          return {i, e};
        }
        break;
      case SplitMatcher::kKana:
        if (is_kana(c)) return {i, run_end(text, i, is_kana)};
        break;
      case SplitMatcher::kDeepSeek:
        if (const size_t e = deepseek_at(text, i); e != kNone) return {i, e};
        break;
      case SplitMatcher::kTekken:
        if (const size_t e = tekken_at(text, i); e != kNone) return {i, e};
        break;
    }
    i += c.length;
  }
  return {n, n};
}

}  // namespace mpf
