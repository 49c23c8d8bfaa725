#include "text/regex.hpp"

#include <oniguruma.h>

#include <utf8proc.h>

#include <map>
#include <mutex>
#include <stdexcept>

#include "text/unicode_text.hpp"
#include "text/utf8.hpp"

namespace mpf {

struct Regex::Compiled {
  regex_t* regex = nullptr;
  ~Compiled() { onig_free(regex); }
};

namespace {

void initialise_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    onig_initialize(encodings, 1);
  });
}

std::string message_of(int code, OnigErrorInfo* info) {
  OnigUChar text[ONIG_MAX_ERROR_MESSAGE_LEN];
  onig_error_code_to_str(text, code, info);
  return reinterpret_cast<const char*>(text);
}

struct RegionDeleter {
  void operator()(OnigRegion* r) const { onig_region_free(r, 1); }
};

// The general categories a \p{...} name stands for, as a bit per utf8proc category; 0 for a
// name that is not a category (a script, a binary property: left to Oniguruma).
uint32_t categories_of(const std::string& name) {
  static const char* const kNames[] = {"Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd",
                                       "Nl", "No", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm",
                                       "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co"};
  uint32_t bits = 0;
  for (uint32_t c = 0; c < 30; ++c) {
    const std::string n = kNames[c];
    if (name == n || (name.size() == 1 && name[0] == n[0]) || (name == "L&" && c >= 1 && c <= 3))
      bits |= 1u << c;
  }
  if (name == "C") bits |= 1u;  // C includes the unassigned Cn
  return bits;
}

// The code points of `categories` as a bracket expression's body: \x{..}-\x{..} ranges.
const std::string& ranges_of(uint32_t categories) {
  static std::mutex mutex;
  static std::map<uint32_t, std::string> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  std::string& body = cache[categories];
  if (!body.empty()) return body;
  const auto in = [&](int32_t cp) {
    return (categories >> uint32_t(unicode::general_category(char32_t(cp))) & 1u) != 0 &&
           !(cp >= 0xD800 && cp <= 0xDFFF);
  };
  char buf[40];
  for (int32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (!in(cp)) continue;
    int32_t last = cp;
    while (last + 1 <= 0x10FFFF && in(last + 1)) ++last;
    std::snprintf(buf, sizeof buf, last > cp ? "\\x{%X}-\\x{%X}" : "\\x{%X}", unsigned(cp),
                  unsigned(last));
    body += buf;
    cp = last;
  }
  return body;
}

// `pattern` with each \p{category} and \P{category} spelt out as the code points Unicode 16.0
// gives it (unicode_text.hpp; Hugging Face's Oniguruma reads 16.0, Debian's an older one).
std::string with_unicode_categories(const std::string& pattern) {
  std::string out;
  int depth = 0;  // inside how many bracket expressions
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      const size_t close = pattern.find('}', i + 2);
      if ((e == 'p' || e == 'P') && i + 2 < pattern.size() && pattern[i + 2] == '{' &&
          close != std::string::npos) {
        std::string name = pattern.substr(i + 3, close - i - 3);
        bool negated = e == 'P';
        if (!name.empty() && name[0] == '^') {
          negated = !negated;
          name.erase(0, 1);
        }
        if (const uint32_t bits = categories_of(name)) {
          const std::string& body = ranges_of(bits);
          if (depth > 0 && !negated)
            out += body;
          else
            out += std::string(negated ? "[^" : "[") + body + "]";
          i = close;
          continue;
        }
      }
      out += c;
      out += e;
      ++i;
      continue;
    }
    if (c == '[') ++depth;
    if (c == ']' && depth > 0) --depth;
    out += c;
  }
  return out;
}

}  // namespace

Regex::Regex(const std::string& given) {
  const std::string pattern = with_unicode_categories(given);
  initialise_once();
  auto compiled = std::make_shared<Compiled>();
  OnigErrorInfo info;
  const auto* p = reinterpret_cast<const OnigUChar*>(pattern.data());
  const int r = onig_new(&compiled->regex, p, p + pattern.size(), ONIG_OPTION_NONE,
                         ONIG_ENCODING_UTF8, ONIG_SYNTAX_RUBY, &info);
  if (r != ONIG_NORMAL) {
    compiled->regex = nullptr;
    throw std::invalid_argument(message_of(r, &info));
  }
  compiled_ = std::move(compiled);
}

namespace {

template <class Found>
void each_match(const regex_t* regex, std::string_view text, Found&& found) {
  // One region per thread, reused: a search allocates nothing.
  thread_local std::unique_ptr<OnigRegion, RegionDeleter> region(onig_region_new());
  const auto* begin = reinterpret_cast<const OnigUChar*>(text.data());
  const auto* end = begin + text.size();
  size_t from = 0;
  bool matched_before = false;
  size_t last_match_end = 0;
  while (from <= text.size()) {
    const int r = onig_search(const_cast<regex_t*>(regex), begin, end, begin + from, end,
                              region.get(), ONIG_OPTION_NONE);
    if (r == ONIG_MISMATCH) return;
    if (r < 0) throw std::runtime_error("Oniguruma search failed: " + message_of(r, nullptr));
    const size_t s = size_t(region->beg[0]), e = size_t(region->end[0]);
    if (s == e && matched_before && last_match_end == e) {
      from += from < text.size() ? size_t(utf8::decode(text, from).length) : 1;
      continue;
    }
    from = e;
    matched_before = true;
    last_match_end = e;
    found(s, e);
  }
}

}  // namespace

void Regex::for_each_match(std::string_view text,
                           const std::function<void(size_t, size_t)>& found) const {
  each_match(compiled_->regex, text, found);
}

void Regex::append_matches(std::string_view text,
                           std::vector<std::pair<size_t, size_t>>& out) const {
  each_match(compiled_->regex, text, [&out](size_t s, size_t e) { out.emplace_back(s, e); });
}

}  // namespace mpf
