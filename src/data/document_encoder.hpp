// What mpiformer-tokenize asks of a tokenizer: a document's text to token ids, the vocabulary's
// size (which sets the shards' width) and the tokens put around every document; and a document
// encoded piece by piece (DocumentStream), so that a large one never has to be held whole.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "text/unknown_symbols.hpp"

namespace mpf {

// What becomes of bytes in a document that are not UTF-8.
enum class InvalidUtf8 {
  kReplace,       // each ill-formed sequence read as U+FFFD (a lossy decode, as Python's
                  // errors="replace" and Rust's from_utf8_lossy give Hugging Face its text)
  kSkipDocument,  // the document left out of the stream
  kError,         // refused (InputError naming the bytes)
};

// What a document's text lost or had replaced on its way to tokens.
struct DocumentRepairs {
  int64_t unknown_dropped = 0;   // characters the vocabulary lacks, left out
  int64_t unknown_replaced = 0;  // ... given the unknown token or U+FFFD's tokens
  int64_t invalid_utf8 = 0;      // ill-formed UTF-8 sequences read as U+FFFD
  bool skipped = false;          // left out whole (--invalid-utf8 skip-document)
  bool any() const { return unknown_dropped || unknown_replaced || invalid_utf8 || skipped; }
};

struct DocumentEncoder {
  // Appends the tokens of one segment of a document to `out`. Special tokens written in it are
  // text (llm.c's encode_ordinary) unless parse_special; added tokens not special are matched, as
  // Hugging Face's encode does. `first` marks the document's first segment.
  std::function<void(std::string_view text, bool first, std::vector<int32_t>& out)> encode;
  // The last position at or after `from` where the text may be cut into segments that encode as
  // the whole does; 0 if there is none.
  std::function<size_t(std::string_view text, size_t from)> cut;
  // What this thread's encode calls did with characters the vocabulary lacks since the last call
  // (and resets it); null: nothing is ever lost.
  std::function<UnknownTally()> take_unknown;
  InvalidUtf8 invalid_utf8 = InvalidUtf8::kReplace;
  int64_t vocab_size = 0;
  std::vector<int32_t> before, after;  // the tokens put before and after every document
  int32_t doc_token = 0;               // the one of them that marks a document (--doc-mask's)
  bool doc_token_after = false;        // it ends a document instead of starting one
  std::string doc_token_text;
};

// A Hugging Face tokenizer.json's encoder. The document tokens are `doc_token` before each
// document if given, else what the file's post-processor puts around a text, else
// <|begin_of_text|> or <|endoftext|> before (text/document_token.hpp). Throws InputError naming
// the file, or the token it lacks.
DocumentEncoder load_document_encoder(const std::string& tokenizer_json,
                                      const std::string& doc_token, bool parse_special = false,
                                      UnknownSymbols unknown = UnknownSymbols::kDrop,
                                      InvalidUtf8 invalid_utf8 = InvalidUtf8::kReplace);

// One document whose text arrives in chunks of any size, its tokens appended to `out` as they
// are known. Only the text since the last cut is held: most tokenizers can cut after a letter
// that a space (GPT-2's and Llama 3's: any non-letter) follows (BpeTokenizer::cut), so ordinary
// text is held a chunk at a time whatever the document's size; a tokenizer whose pipeline has no
// such places (no pre-tokenizer: Llama 2, Gemma) holds each document whole. Text with no place to
// cut for kMaxHeldBytes (binary data, one enormous number, or any document of such a tokenizer)
// is refused: encoded whole it would take some 20 times its size in memory.
// Bytes that are not UTF-8 are dealt with as encoder.invalid_utf8 says (a sequence split between
// chunks is seen whole); what was lost or replaced is counted in repairs().
class DocumentStream {
 public:
  static constexpr size_t kMaxHeldBytes = size_t(64) << 20;

  DocumentStream(const DocumentEncoder& encoder, std::vector<int32_t>& out);
  // Throws InputError when the text held passes kMaxHeldBytes, or for ill-formed UTF-8 under
  // InvalidUtf8::kError. Once the document is to be skipped (repairs().skipped) the rest of its
  // text is ignored; the tokens it already gave are the caller's to take back.
  void add(std::string_view chunk);
  // The document's end: encodes what is held.
  void finish();
  const DocumentRepairs& repairs() const { return repairs_; }

 private:
  void take(std::string_view text, bool end);
  void ill_formed(std::string_view bytes);
  void encode(std::string_view text);

  const DocumentEncoder& encoder_;
  std::vector<int32_t>& out_;
  std::string held_;     // the text since the last cut
  std::string pending_;  // the start of a UTF-8 sequence the next chunk may complete
  size_t scanned_ = 0;   // held_ holds no cut before this
  bool first_ = true;    // no segment encoded yet
  int64_t offset_ = 0;   // the document's bytes taken so far
  DocumentRepairs repairs_;
};

}  // namespace mpf
