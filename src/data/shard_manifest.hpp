// manifest.json beside a tokenized corpus's shards: what went in (the inputs, the tokenizer and
// its SHA-256, the document token) and what came out (every shard's tokens and SHA-256, the
// totals), so a data set can be checked (`sha256sum`) and its making repeated. It holds nothing
// that depends on the run (no rank count, no time), so a repeat gives the same file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/corpus_reader.hpp"
#include "data/document_encoder.hpp"
#include "data/shard_writer.hpp"

namespace mpf {

// A document that lost characters or had them replaced on its way to tokens, or was skipped:
// its input and the byte its line starts at (0 for a text file).
struct RepairedDocument {
  std::string input;
  int64_t byte = 0;
  DocumentRepairs repairs;
};

struct ShardManifest {
  std::string tokenizer, tokenizer_sha256;
  int64_t vocab_size = 0;
  std::string doc_token_text;
  int32_t doc_token = 0;
  bool doc_token_after = false;  // it ends every document (an end-of-sequence token)
  int width = 2;
  int64_t shard_tokens = 0, val_tokens = 0;
  std::string text_field;
  std::vector<CorpusFile> inputs;
  int64_t documents = 0, val_documents = 0, tokens = 0, text_bytes = 0;
  std::vector<ShardInfo> shards;
  std::string unknown_bytes, invalid_utf8;  // the choices (--unknown-bytes, --invalid-utf8)
  std::string unicode;                      // the Unicode data's version
  int64_t repaired_documents = 0, unknown_dropped = 0, unknown_replaced = 0;
  int64_t invalid_utf8_replaced = 0, skipped_documents = 0;
  std::vector<RepairedDocument> repaired;  // in corpus order, the first ones (a bounded list)
};

std::string manifest_json(const ShardManifest& m);

// The tokenizer.vocab_size of the manifest.json at `path` (what a fresh model's vocabulary must
// hold). InputError naming the file when it cannot be read, is not JSON, or lacks a positive
// integer tokenizer.vocab_size.
int64_t read_manifest_vocab_size(const std::string& path);

// The document token a manifest records (mpiformer-tokenize's "doc_token": its id and whether it
// comes before or after every document); nullopt for a manifest without one. InputError as above
// for an unreadable or malformed file.
struct ManifestDocToken {
  int32_t id = 0;
  bool after = false;
  std::string text;
};
std::optional<ManifestDocToken> read_manifest_doc_token(const std::string& path);

// The shard file names a manifest's text lists (plain names, no directory); empty if the text is
// not a whole manifest (a run cut off while writing it).
std::vector<std::string> manifest_shard_files(const std::string& text);

}  // namespace mpf
