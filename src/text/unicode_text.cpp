#include "text/unicode_text.hpp"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>
#include <stdexcept>

#include "text/utf8.hpp"

namespace mpf::unicode {

namespace {

utf8proc_propval_t category(char32_t cp) {
  return utf8proc_category(utf8proc_int32_t(cp));
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
    utf8::append(out, char32_t(utf8proc_tolower(utf8proc_int32_t(c.cp))));
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

}  // namespace mpf::unicode
