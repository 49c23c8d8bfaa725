#include "text/added_tokens.hpp"

#include <algorithm>

#include "text/unicode_text.hpp"
#include "text/utf8.hpp"

namespace mpf {

namespace {

// Where the character that ends text[0, end) starts (end > 0).
size_t char_start(std::string_view text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && end - start < 4 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80)
    --start;
  return start;
}

char32_t last_char(std::string_view text, size_t end) {
  return utf8::decode(text, char_start(text, end)).cp;
}

}  // namespace

void AddedTokens::add(const AddedToken& token, std::string match) {
  if (match.empty()) return;  // an empty token never matches
  for (auto& table : by_byte_)
    if (table.empty()) table.resize(256);
  const uint32_t index = uint32_t(tokens_.size());
  tokens_.push_back(token);
  std::vector<uint32_t>& list = by_byte_[token.normalized][static_cast<uint8_t>(match[0])];
  starts_[token.normalized][static_cast<uint8_t>(match[0])] = true;
  matchable_[token.normalized][1] = true;
  if (!token.special) matchable_[token.normalized][0] = true;
  match_.push_back(std::move(match));
  list.push_back(index);
  std::stable_sort(list.begin(), list.end(),
                   [&](uint32_t a, uint32_t b) { return match_[a].size() > match_[b].size(); });
}

void AddedTokens::split(std::string_view text, bool normalized, bool parse_special,
                        std::vector<Part>& parts) const {
  const std::vector<std::vector<uint32_t>>& table = by_byte_[normalized];
  size_t done = 0;  // the end of the last token taken
  const bool* starts = starts_[normalized];
  for (size_t at = 0; !table.empty() && at < text.size();) {
    if (!starts[static_cast<uint8_t>(text[at])]) {
      ++at;
      continue;
    }
    const uint32_t* found = nullptr;
    for (const uint32_t& i : table[static_cast<uint8_t>(text[at])]) {
      if (text.compare(at, match_[i].size(), match_[i]) == 0) {
        found = &i;
        break;
      }
    }
    if (!found) {
      ++at;
      continue;
    }
    const AddedToken& t = tokens_[*found];
    size_t start = at, stop = at + match_[*found].size();
    at = stop;  // the search goes on from the match's end, whether it is taken or not
    if (t.special && !parse_special) continue;
    if (t.single_word) {
      const bool space_before = start == 0 || !unicode::is_word(last_char(text, start));
      const bool space_after =
          stop == text.size() || !unicode::is_word(utf8::decode(text, stop).cp);
      if (!space_before || !space_after) continue;
    }
    if (t.lstrip) {
      size_t s = start;
      while (s > 0 && unicode::is_whitespace(last_char(text, s))) s = char_start(text, s);
      start = std::max(s, done);
    }
    if (t.rstrip) {
      while (stop < text.size()) {
        const utf8::Char c = utf8::decode(text, stop);
        if (!unicode::is_whitespace(c.cp)) break;
        stop += size_t(c.length);
      }
    }
    if (done < start) parts.push_back({done, start, -1});
    parts.push_back({start, stop, t.id});
    done = stop;
    at = stop;
  }
  if (done < text.size() || parts.empty()) parts.push_back({done, text.size(), -1});
}

bool AddedTokens::may_span_cut(bool parse_special) const {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& t = tokens_[i];
    if (t.special && !parse_special) continue;
    if (t.lstrip || t.rstrip || t.single_word) return true;
    const std::string& m = match_[i];
    for (size_t at = 0; at < m.size();) {
      const utf8::Char c = utf8::decode(m, at);
      at += size_t(c.length);
      if (unicode::is_letter(c.cp) && at < m.size() && m[at] == ' ') return true;
    }
  }
  return false;
}

}  // namespace mpf
