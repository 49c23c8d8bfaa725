#include "text/unicode_text.hpp"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <stdexcept>

#include "text/utf8.hpp"

namespace mpf::unicode {

namespace {

// The characters Unicode 15.1 and 16.0 assigned, which utf8proc's Unicode 15.0 data (Debian
// bookworm's utf8proc 2.8 and unicode-data 15.0, the newest it offers) leaves unassigned (Cn) and
// Hugging Face's tokenizers classify: their general categories, as UnicodeData.txt 16.0 gives
// them. 15.1: CJK Unified Ideographs Extension I (U+2EBF0-2EE5D) and five ideographic
// description characters and strokes; 16.0: Garay, Gurung Khema, Kirat Rai, Ol Onal, Sunuwar,
// Todhri, Tulu-Tigalari, Myanmar Extended-C, Egyptian Hieroglyphs Extended-A, Symbols for Legacy
// Computing Supplement, and letters, marks and symbols added to older blocks (5,185 in all).
// Unicode 17.0's characters are not here: Hugging Face's Oniguruma does not know them.
struct NewerRange {
  char32_t first, last;
  Category category;
};
constexpr NewerRange kNewer[] = {
    {0x00897, 0x00897, Category::kMn}, {0x01B4E, 0x01B4F, Category::kPo},
    {0x01B7F, 0x01B7F, Category::kPo}, {0x01C89, 0x01C89, Category::kLu},
    {0x01C8A, 0x01C8A, Category::kLl}, {0x02427, 0x02429, Category::kSo},
    {0x02FFC, 0x02FFF, Category::kSo}, {0x031E4, 0x031E5, Category::kSo},
    {0x031EF, 0x031EF, Category::kSo}, {0x0A7CB, 0x0A7CC, Category::kLu},
    {0x0A7CD, 0x0A7CD, Category::kLl}, {0x0A7DA, 0x0A7DA, Category::kLu},
    {0x0A7DB, 0x0A7DB, Category::kLl}, {0x0A7DC, 0x0A7DC, Category::kLu},
    {0x105C0, 0x105F3, Category::kLo}, {0x10D40, 0x10D49, Category::kNd},
    {0x10D4A, 0x10D4D, Category::kLo}, {0x10D4E, 0x10D4E, Category::kLm},
    {0x10D4F, 0x10D4F, Category::kLo}, {0x10D50, 0x10D65, Category::kLu},
    {0x10D69, 0x10D6D, Category::kMn}, {0x10D6E, 0x10D6E, Category::kPd},
    {0x10D6F, 0x10D6F, Category::kLm}, {0x10D70, 0x10D85, Category::kLl},
    {0x10D8E, 0x10D8F, Category::kSm}, {0x10EC2, 0x10EC4, Category::kLo},
    {0x10EFC, 0x10EFC, Category::kMn}, {0x11380, 0x11389, Category::kLo},
    {0x1138B, 0x1138B, Category::kLo}, {0x1138E, 0x1138E, Category::kLo},
    {0x11390, 0x113B5, Category::kLo}, {0x113B7, 0x113B7, Category::kLo},
    {0x113B8, 0x113BA, Category::kMc}, {0x113BB, 0x113C0, Category::kMn},
    {0x113C2, 0x113C2, Category::kMc}, {0x113C5, 0x113C5, Category::kMc},
    {0x113C7, 0x113CA, Category::kMc}, {0x113CC, 0x113CD, Category::kMc},
    {0x113CE, 0x113CE, Category::kMn}, {0x113CF, 0x113CF, Category::kMc},
    {0x113D0, 0x113D0, Category::kMn}, {0x113D1, 0x113D1, Category::kLo},
    {0x113D2, 0x113D2, Category::kMn}, {0x113D3, 0x113D3, Category::kLo},
    {0x113D4, 0x113D5, Category::kPo}, {0x113D7, 0x113D8, Category::kPo},
    {0x113E1, 0x113E2, Category::kMn}, {0x116D0, 0x116E3, Category::kNd},
    {0x11BC0, 0x11BE0, Category::kLo}, {0x11BE1, 0x11BE1, Category::kPo},
    {0x11BF0, 0x11BF9, Category::kNd}, {0x11F5A, 0x11F5A, Category::kMn},
    {0x13460, 0x143FA, Category::kLo}, {0x16100, 0x1611D, Category::kLo},
    {0x1611E, 0x16129, Category::kMn}, {0x1612A, 0x1612C, Category::kMc},
    {0x1612D, 0x1612F, Category::kMn}, {0x16130, 0x16139, Category::kNd},
    {0x16D40, 0x16D42, Category::kLm}, {0x16D43, 0x16D6A, Category::kLo},
    {0x16D6B, 0x16D6C, Category::kLm}, {0x16D6D, 0x16D6F, Category::kPo},
    {0x16D70, 0x16D79, Category::kNd}, {0x18CFF, 0x18CFF, Category::kLo},
    {0x1CC00, 0x1CCEF, Category::kSo}, {0x1CCF0, 0x1CCF9, Category::kNd},
    {0x1CD00, 0x1CEB3, Category::kSo}, {0x1E5D0, 0x1E5ED, Category::kLo},
    {0x1E5EE, 0x1E5EF, Category::kMn}, {0x1E5F0, 0x1E5F0, Category::kLo},
    {0x1E5F1, 0x1E5FA, Category::kNd}, {0x1E5FF, 0x1E5FF, Category::kPo},
    {0x1F8B2, 0x1F8BB, Category::kSo}, {0x1F8C0, 0x1F8C1, Category::kSo},
    {0x1FA89, 0x1FA89, Category::kSo}, {0x1FA8F, 0x1FA8F, Category::kSo},
    {0x1FABE, 0x1FABE, Category::kSo}, {0x1FAC6, 0x1FAC6, Category::kSo},
    {0x1FADC, 0x1FADC, Category::kSo}, {0x1FADF, 0x1FADF, Category::kSo},
    {0x1FAE9, 0x1FAE9, Category::kSo}, {0x1FBCB, 0x1FBEF, Category::kSo},
    {0x2EBF0, 0x2EE5D, Category::kLo},
};

Category newer_category(char32_t cp) {
  const NewerRange* end = kNewer + sizeof kNewer / sizeof kNewer[0];
  const NewerRange* r = std::upper_bound(
      kNewer, end, cp, [](char32_t c, const NewerRange& range) { return c < range.first; });
  if (r == kNewer || cp > (r - 1)->last) return Category::kCn;
  return (r - 1)->category;
}

// The lowercase of 16.0's capital letters (UnicodeData.txt's simple mappings), which utf8proc
// maps to themselves.
char32_t newer_lowercase(char32_t cp) {
  if (cp >= 0x10D50 && cp <= 0x10D65) return cp + 0x20;  // Garay
  switch (cp) {
    case 0x1C89:
      return 0x1C8A;  // CYRILLIC CAPITAL LETTER TJE
    case 0xA7CB:
      return 0x0264;  // LATIN CAPITAL LETTER RAMS HORN
    case 0xA7CC:
      return 0xA7CD;  // LATIN CAPITAL LETTER S WITH DIAGONAL STROKE
    case 0xA7DA:
      return 0xA7DB;  // LATIN CAPITAL LETTER LAMBDA
    case 0xA7DC:
      return 0x019B;  // LATIN CAPITAL LETTER LAMBDA WITH STROKE
    default:
      return cp;
  }
}

utf8proc_propval_t category(char32_t cp) {
  const utf8proc_propval_t c = utf8proc_category(utf8proc_int32_t(cp));
  if (c != UTF8PROC_CATEGORY_CN) return c;
  return utf8proc_propval_t(newer_category(cp));  // the same order as utf8proc's
}

}  // namespace

namespace {

std::string normalize_run(std::string_view text, Form form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case Form::kNFC:
      options |= UTF8PROC_COMPOSE;
      break;
    case Form::kNFD:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case Form::kNFKC:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case Form::kNFKD:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   utf8proc_ssize_t(text.size()), &out, utf8proc_option_t(options));
  if (n < 0) throw std::runtime_error(std::string("utf8proc: ") + utf8proc_errmsg(n));
  const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  return std::string(reinterpret_cast<const char*>(out), size_t(n));
}

}  // namespace

// ASCII is its own normal form in every form, and no ASCII character composes with the one before
// it (none is the second of a composition) or reorders past it (all are starters): the text is
// normalized a run at a time, a run being the non-ASCII characters with the ASCII one before them.
std::string normalize(std::string_view text, Form form) {
  std::string out;
  out.reserve(text.size());
  size_t done = 0;
  for (size_t at = 0; at < text.size();) {
    if (static_cast<unsigned char>(text[at]) < 0x80) {
      ++at;
      continue;
    }
    const size_t begin = at > done ? at - 1 : at;  // the ASCII character it may compose with
    size_t end = at;
    while (end < text.size() && static_cast<unsigned char>(text[end]) >= 0x80) ++end;
    out.append(text.substr(done, begin - done));
    out += normalize_run(text.substr(begin, end - begin), form);
    done = at = end;
  }
  out.append(text.substr(done));
  return out;
}

std::string lowercase(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t at = 0; at < text.size();) {
    const unsigned char b = static_cast<unsigned char>(text[at]);
    if (b < 0x80) {
      out += char(b >= 'A' && b <= 'Z' ? b + 32 : b);
      ++at;
      continue;
    }
    const utf8::Char c = utf8::decode(text, at);
    at += size_t(c.length);
    // The one unconditional lowercase mapping to two characters (SpecialCasing.txt), which
    // utf8proc's simple mapping leaves out.
    if (c.cp == 0x130) {
      out += "i\xCC\x87";
      continue;
    }
    const char32_t lower = char32_t(utf8proc_tolower(utf8proc_int32_t(c.cp)));
    utf8::append(out, lower == c.cp ? newer_lowercase(c.cp) : lower);
  }
  return out;
}

namespace {

// [0-9A-Za-z]: std::isalnum in the C locale, without its call and its locale.
bool ascii_alnum(char32_t cp) {
  return (cp >= '0' && cp <= '9') || ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z');
}

}  // namespace

bool is_whitespace(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= '\t' && cp <= '\r');
  if (cp == 0x85) return true;
  const auto c = category(cp);
  return c == UTF8PROC_CATEGORY_ZS || c == UTF8PROC_CATEGORY_ZL || c == UTF8PROC_CATEGORY_ZP;
}

bool is_mark(char32_t cp) {
  const auto c = category(cp);
  return c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_MC || c == UTF8PROC_CATEGORY_ME;
}

bool is_numeric(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  const auto c = category(cp);
  return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

bool is_letter(char32_t cp) {
  const auto c = category(cp);
  return c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO;
}

bool is_punctuation(char32_t cp) {
  if (cp < 0x80) return cp > ' ' && cp < 0x7F && !ascii_alnum(cp);
  const auto c = category(cp);
  return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

bool is_word(char32_t cp) {
  if (cp < 0x80) return ascii_alnum(cp) || cp == '_';
  const auto c = category(cp);
  if ((c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_ME) || c == UTF8PROC_CATEGORY_ND ||
      c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_PC)
    return true;
  // Join_Control, and the symbols that are Other_Alphabetic (circled and squared letters).
  return cp == 0x200C || cp == 0x200D || (cp >= 0x24B6 && cp <= 0x24E9) ||
         (cp >= 0x1F130 && cp <= 0x1F149) || (cp >= 0x1F150 && cp <= 0x1F169) ||
         (cp >= 0x1F170 && cp <= 0x1F189);
}

Category general_category(char32_t cp) {
  if (cp >= 0x110000) return Category::kCn;
  return Category(category(cp));
}

const char* version() {
  return utf8proc_unicode_version();
}

std::string data_version() {
  return std::string(version()) +
         " (utf8proc), with the letters, digits and other characters "
         "of 15.1 and 16.0";
}

}  // namespace mpf::unicode
