#include "data/document_encoder.hpp"

#include <memory>
#include <optional>

#include "core/error.hpp"
#include "text/bpe_tokenizer.hpp"

namespace mpf {

DocumentEncoder load_document_encoder(const std::string& tokenizer_json,
                                      const std::string& doc_token) {
  auto tokenizer = std::make_shared<const BpeTokenizer>(BpeTokenizer::load(tokenizer_json));
  DocumentEncoder e;
  e.encode = [tokenizer](std::string_view text) { return tokenizer->encode(text); };
  e.vocab_size = tokenizer->vocab_size();
  std::optional<int32_t> id;
  if (!doc_token.empty()) {
    id = tokenizer->token_id(doc_token);
    require(id.has_value(), "--doc-token " + doc_token + ": tokenizer " + tokenizer_json +
                                " has no such token; pass one of its tokens, e.g. "
                                "<|endoftext|> or <|begin_of_text|>");
    e.doc_token_text = doc_token;
  } else {
    for (const char* candidate : {"<|begin_of_text|>", "<|endoftext|>"}) {
      id = tokenizer->token_id(candidate);
      if (id) {
        e.doc_token_text = candidate;
        break;
      }
    }
    require(id.has_value(), "tokenizer " + tokenizer_json +
                                " has neither <|begin_of_text|> nor <|endoftext|>; pass "
                                "--doc-token with the token to put before each document");
  }
  e.doc_token = *id;
  return e;
}

}  // namespace mpf
