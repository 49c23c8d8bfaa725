#include "data/document_encoder.hpp"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>

#include "core/error.hpp"
#include "text/bpe_tokenizer.hpp"
#include "text/document_token.hpp"
#include "text/utf8.hpp"

namespace mpf {

DocumentEncoder load_document_encoder(const std::string& tokenizer_json,
                                      const std::string& doc_token, bool parse_special,
                                      UnknownSymbols unknown, InvalidUtf8 invalid_utf8) {
  auto tokenizer = std::make_shared<const BpeTokenizer>(
      BpeTokenizer::load(tokenizer_json).with_unknown(unknown));
  DocumentEncoder e;
  e.take_unknown = [] { return BpeTokenizer::take_unknown_tally(); };
  e.invalid_utf8 = invalid_utf8;
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
    : encoder_(encoder), out_(out) {
  if (encoder_.take_unknown) encoder_.take_unknown();  // counts from before are not this one's
}

void DocumentStream::encode(std::string_view text) {
  encoder_.encode(text, first_, out_);
  first_ = false;
  if (encoder_.take_unknown) {
    const UnknownTally t = encoder_.take_unknown();
    repairs_.unknown_dropped += t.dropped;
    repairs_.unknown_replaced += t.replaced;
  }
}

void DocumentStream::ill_formed(std::string_view bytes) {
  switch (encoder_.invalid_utf8) {
    case InvalidUtf8::kReplace:
      held_ += "\xEF\xBF\xBD";
      ++repairs_.invalid_utf8;
      return;
    case InvalidUtf8::kSkipDocument:
      repairs_.skipped = true;
      held_.clear();
      return;
    case InvalidUtf8::kError: {
      std::string hex;
      char b[8];
      for (const char c : bytes) {
        std::snprintf(b, sizeof b, "%s0x%02X", hex.empty() ? "" : " ",
                      static_cast<unsigned>(static_cast<unsigned char>(c)));
        hex += b;
      }
      throw InputError("the text is not UTF-8: byte " + std::to_string(offset_) + " begins " + hex +
                       "; pass --invalid-utf8 replace to read such bytes as U+FFFD (as Hugging "
                       "Face users decode text) or --invalid-utf8 skip-document");
    }
  }
}

// Appends `text`'s well-formed UTF-8 to held_ and deals with the rest; the start of a sequence
// that the text ends in waits in pending_ unless this is the document's end.
void DocumentStream::take(std::string_view text, bool end) {
  for (size_t at = 0; at < text.size() && !repairs_.skipped;) {
    const size_t good = at + utf8::well_formed_prefix(text.substr(at));
    held_.append(text.substr(at, good - at));
    offset_ += int64_t(good - at);
    if (good == text.size()) break;
    const utf8::Subpart bad = utf8::ill_formed_subpart(text, good);
    if (bad.truncated && !end) {
      pending_.assign(text.substr(good));
      return;
    }
    ill_formed(text.substr(good, bad.length));
    offset_ += int64_t(bad.length);
    at = good + bad.length;
  }
  pending_.clear();
}

void DocumentStream::add(std::string_view chunk) {
  if (repairs_.skipped) return;
  if (pending_.empty()) {
    take(chunk, false);
  } else {
    take(pending_ + std::string(chunk), false);
  }
  if (repairs_.skipped) return;
  const size_t q = encoder_.cut(held_, scanned_);
  if (q > 0) {
    encode(std::string_view(held_).substr(0, q));
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
  if (!pending_.empty() && !repairs_.skipped) take(std::string(pending_), true);
  if (!repairs_.skipped) encode(held_);
  held_.clear();
  held_.shrink_to_fit();
  scanned_ = 0;
  first_ = true;
}

}  // namespace mpf
