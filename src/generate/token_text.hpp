// How generated tokens become output: a tokenizer's pieces (raw bytes, which may split a UTF-8
// character between tokens: streamed as they are, the terminal joins them); without one, a
// byte-level model's tokens (vocabulary 256) as bytes, any other model's as decimal ids separated
// by spaces.
#pragma once

#include <cstdint>
#include <string>

#include "io/llmc_tokenizer.hpp"

namespace mpf {

class TokenText {
 public:
  // `tokenizer` may be null; it must outlive this object.
  TokenText(const Tokenizer* tokenizer, int vocab) : tokenizer_(tokenizer), vocab_(vocab) {}
  // The output of the next token of a sequence.
  std::string next(int32_t id);

 private:
  const Tokenizer* tokenizer_;
  int vocab_;
  bool first_ = true;
};

}  // namespace mpf
