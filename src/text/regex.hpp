// A compiled regular expression as Hugging Face's tokenizers runs its Split and Replace patterns:
// Oniguruma with its default (Ruby) syntax on UTF-8, matches found left to right without
// overlapping, an empty match right after the previous match skipped (the onig crate's find_iter).
// A \p{...} general category is spelt out from the Unicode 16.0 categories of unicode_text.hpp,
// as Hugging Face's own Oniguruma reads them (Debian's libonig 6.9.8 knows Unicode 14).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mpf {

class Regex {
 public:
  // Throws std::invalid_argument with Oniguruma's message for a pattern it cannot compile.
  explicit Regex(const std::string& pattern);

  // Calls found(begin, end) for each match in `text` (well-formed UTF-8), in order.
  void for_each_match(std::string_view text,
                      const std::function<void(size_t, size_t)>& found) const;
  // The same matches as (begin, end) pairs appended to `out`: no call per match.
  void append_matches(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  struct Compiled;
  std::shared_ptr<const Compiled> compiled_;
};

}  // namespace mpf
