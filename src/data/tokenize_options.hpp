// mpiformer-tokenize's flags (docs/data.md): what to read, which tokenizer, where the shards go.
// apps/tokenize.cpp parses them with the settings table (layout/settings.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/document_encoder.hpp"

namespace mpf {

struct TokenizeOptions {
  std::vector<std::string> inputs;  // files, directories, globs, in the order given
  std::string tokenizer;            // a Hugging Face tokenizer.json
  std::string output_dir;
  std::string name = "data";        // shard names: <name>_val_000000.bin, <name>_train_...
  std::string text_field = "text";  // the .jsonl field holding a document
  bool parse_special = false;       // special tokens' text in a document becomes their ids
  std::string doc_token;  // "": <|begin_of_text|> if the tokenizer has it, else <|endoftext|>
  int64_t shard_tokens = 100000000;       // llm.c's shard size
  int64_t val_tokens = 0;                 // 0: no validation split
  int64_t unit_bytes = int64_t(8) << 20;  // text per work unit, dealt to the ranks in turn
  // Hugging Face's ways by default: a character the vocabulary lacks left out, ill-formed UTF-8
  // decoded lossily (U+FFFD).
  UnknownSymbols unknown_bytes = UnknownSymbols::kDrop;
  InvalidUtf8 invalid_utf8 = InvalidUtf8::kReplace;
  bool help = false;
};

// The flags' spellings of the choices ("drop", "skip-document", ...), for the manifest.
std::string unknown_bytes_name(UnknownSymbols how);
std::string invalid_utf8_name(InvalidUtf8 how);

}  // namespace mpf
