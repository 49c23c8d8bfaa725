// A tokenizer.json's added tokens as Hugging Face's AddedVocabulary matches them in text: the
// leftmost match, the longest at that place, then on from its end; a single_word token only
// between non-word characters, lstrip and rstrip taking the whitespace beside it into the token.
// Tokens with `normalized` false are matched in the raw text, the others in the normalized text
// (each in its normalized form).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mpf {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false, normalized = false, lstrip = false, rstrip = false, single_word = false;
};

class AddedTokens {
 public:
  // A part of a text: a token's id with its span, or text between (id -1).
  struct Part {
    size_t begin, end;
    int32_t id;
  };

  // `match` is the text a token is looked for as (its content, or the normalized content).
  void add(const AddedToken& token, std::string match);
  bool empty() const { return tokens_.empty(); }
  const std::vector<AddedToken>& tokens() const { return tokens_; }

  // The parts of `text`, matching the tokens whose `normalized` is `normalized`; special tokens
  // only when `parse_special` (else their text is text, as with encode_special_tokens).
  void split(std::string_view text, bool normalized, bool parse_special,
             std::vector<Part>& parts) const;
  // Whether split() may match any token: when not, a text has no need of it.
  bool matchable(bool normalized, bool parse_special) const {
    return matchable_[normalized][parse_special];
  }
  // Whether a token that split() may match could match across, or take in, a space that follows
  // a letter (the place where a long document is cut: pre_tokenizer_steps.hpp).
  bool may_span_cut(bool parse_special) const;

 private:
  std::vector<AddedToken> tokens_;
  std::vector<std::string> match_;  // what each token is matched as
  // [normalized][first byte]: the tokens' indices, longest first.
  std::vector<std::vector<uint32_t>> by_byte_[2];
  bool starts_[2][256] = {};   // [normalized][byte]: a token starts with it
  bool matchable_[2][2] = {};  // [normalized][parse_special]: split() may match a token
};

}  // namespace mpf
