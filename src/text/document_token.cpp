#include "text/document_token.hpp"

namespace mpf {

std::optional<DocumentTokens> document_tokens(const BpeTokenizer& tokenizer) {
  DocumentTokens d;
  d.before = tokenizer.template_prefix();
  d.after = tokenizer.template_suffix();
  if (!d.before.empty()) {
    d.boundary = d.before.front();
  } else if (!d.after.empty()) {
    d.boundary = d.after.back();
    d.boundary_after = true;
  } else {
    for (const char* candidate : {"<|begin_of_text|>", "<|endoftext|>"}) {
      if (const std::optional<int32_t> id = tokenizer.token_id(candidate)) {
        d.before = {*id};
        d.boundary = *id;
        break;
      }
    }
    if (d.boundary < 0) return std::nullopt;
  }
  d.boundary_text = tokenizer.token_bytes(d.boundary);
  return d;
}

}  // namespace mpf
