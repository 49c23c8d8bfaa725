// Hugging Face's normalizers: NFC, NFD, NFKC, NFKD, Lowercase, Replace, Prepend, Strip,
// StripAccents and Sequence (an empty Sequence changes nothing), applied to each part of a text
// between added tokens, in order.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "text/json_reader.hpp"
#include "text/regex.hpp"
#include "text/unicode_text.hpp"

namespace mpf {

class Normalizer {
 public:
  // tokenizer.json's "normalizer" (null or absent: none). Refuses by name a normalizer this
  // encoder does not implement (BertNormalizer, Precompiled, ...).
  static Normalizer read(const json::Value* normalizer, const JsonReader& r);

  bool empty() const { return steps_.empty(); }
  // `text` (well-formed UTF-8) normalized. `part_start`: the text starts a part (what Prepend and
  // a left Strip act on); false for a later segment of a part cut in pieces.
  std::string apply(std::string_view text, bool part_start = true) const;
  // The same into `out`, with `spare` for the steps that rewrite the text (neither may hold
  // `text`): both keep their capacity, so a caller reusing them allocates nothing once grown.
  void apply(std::string_view text, bool part_start, std::string& out, std::string& spare) const;
  // Whether text cut just before an ASCII space that follows a letter normalizes, piece by piece,
  // to the whole's normalization (no step looks across such a place or at the part's end).
  bool cuttable() const;

 private:
  enum class Kind { kForm, kLowercase, kReplace, kPrepend, kStrip, kStripAccents };
  struct Step {
    Kind kind = Kind::kForm;
    unicode::Form form = unicode::Form::kNFC;
    std::string pattern, content;        // Replace: a literal pattern (or none), its content
    std::shared_ptr<const Regex> regex;  // Replace with a Regex pattern (or an empty literal)
    bool left = false, right = false;    // Strip
  };
  void read_step(const json::Value& v, const std::string& name, const JsonReader& r);

  std::vector<Step> steps_;
};

// Replaces each match of `regex` (or each occurrence of `literal`, non-empty) in `text` by
// `content`, as Hugging Face's Replace does.
std::string replace_all(std::string_view text, const std::string& literal, const Regex* regex,
                        const std::string& content);
// The same into `out` (its text replaced, its capacity kept).
void replace_all(std::string_view text, const std::string& literal, const Regex* regex,
                 const std::string& content, std::string& out);

}  // namespace mpf
