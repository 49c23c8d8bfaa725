#include "data/document_encoder.hpp"

#include <algorithm>
#include <memory>
#include <optional>

#include "core/error.hpp"
#include "text/bpe_tokenizer.hpp"
#include "text/document_token.hpp"

namespace mpf {

DocumentEncoder load_document_encoder(const std::string& tokenizer_json,
                                      const std::string& doc_token, bool parse_special) {
  auto tokenizer = std::make_shared<const BpeTokenizer>(BpeTokenizer::load(tokenizer_json));
  DocumentEncoder e;
  if (parse_special) {
    e.encode = [tokenizer](std::string_view text, bool, std::vector<int32_t>& out) {
      const std::vector<int32_t> ids = tokenizer->encode_with_specials(text);
      out.insert(out.end(), ids.begin(), ids.end());
    };
    // A special token may stand anywhere: the document is encoded whole.
    e.cut = [](std::string_view, size_t) { return size_t(0); };
  } else {
    e.encode = [tokenizer](std::string_view text, bool first, std::vector<int32_t>& out) {
      tokenizer->encode_segment(text, first, out);
    };
    e.cut = [tokenizer](std::string_view text, size_t from) { return tokenizer->cut(text, from); };
  }
  e.vocab_size = tokenizer->vocab_size();
  if (!doc_token.empty()) {
    const std::optional<int32_t> id = tokenizer->token_id(doc_token);
    require(id.has_value(), "--doc-token " + doc_token + ": tokenizer " + tokenizer_json +
                                " has no such token; pass one of its tokens, e.g. "
                                "<|endoftext|> or <|begin_of_text|>");
    e.before = {*id};
    e.doc_token = *id;
    e.doc_token_text = doc_token;
    return e;
  }
  const std::optional<DocumentTokens> d = document_tokens(*tokenizer);
  require(d.has_value(), "tokenizer " + tokenizer_json +
                             " puts no token around a text (its post_processor) and has neither "
                             "<|begin_of_text|> nor <|endoftext|>; pass --doc-token with the "
                             "token to put before each document");
  e.before = d->before;
  e.after = d->after;
  e.doc_token = d->boundary;
  e.doc_token_after = d->boundary_after;
  e.doc_token_text = d->boundary_text;
  return e;
}

DocumentStream::DocumentStream(const DocumentEncoder& encoder, std::vector<int32_t>& out)
    : encoder_(encoder), out_(out) {}

void DocumentStream::add(std::string_view chunk) {
  held_.append(chunk);
  const size_t q = encoder_.cut(held_, scanned_);
  if (q > 0) {
    encoder_.encode(std::string_view(held_).substr(0, q), first_, out_);
    first_ = false;
    held_.erase(0, q);
  }
  // A cut is looked for up to 4 bytes before the end (the character there may be incomplete):
  // the next look starts there.
  scanned_ = held_.size() > 4 ? held_.size() - 4 : 0;
  if (held_.size() > kMaxHeldBytes) {
    throw InputError("a document holds " + std::to_string(held_.size() >> 20) +
                     " MiB of text with no place to cut it (no letter followed by another "
                     "character: binary data, or one enormous number or symbol run); encoded "
                     "whole it would take some 20 times that memory: remove the document or "
                     "split it");
  }
}

void DocumentStream::finish() {
  encoder_.encode(held_, first_, out_);
  held_.clear();
  held_.shrink_to_fit();
  scanned_ = 0;
  first_ = true;
}

}  // namespace mpf
