// The token that marks a document's boundary in a token stream, as a tokenizer.json's files say:
// the post-processor's template puts its begin-of-sequence token before a text (Llama 3's
// <|begin_of_text|>, Llama 2's <s>) and/or its end-of-sequence token after; a file whose template
// adds neither (GPT-2, Qwen2.5) gets llm.c's convention, <|endoftext|> before every document.
// mpiformer-tokenize writes it so, and --doc-mask finds documents by it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "text/bpe_tokenizer.hpp"

namespace mpf {

struct DocumentTokens {
  std::vector<int32_t> before, after;  // the ids put before and after each document
  int32_t boundary = -1;        // the one that marks a boundary: before[0], else after's last
  bool boundary_after = false;  // the boundary token ends a document (EOS) instead
  std::string boundary_text;    // its content
};

// The template's tokens, else <|begin_of_text|> or <|endoftext|> before each document; nullopt
// when the tokenizer has none of these.
std::optional<DocumentTokens> document_tokens(const BpeTokenizer& tokenizer);

}  // namespace mpf
