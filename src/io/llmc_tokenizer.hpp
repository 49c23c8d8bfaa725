// llm.c's GPT-2 tokenizer file (gpt2_tokenizer.bin, written by llm.c's train_gpt2.py; read by
// llmc/tokenizer.h), for decoding only: a header of 256 int32 (magic 20240328, version 1 or 2,
// vocabulary size n, and in version 2 the end-of-text id), then for each token id in order one
// length byte (1..255) and that many bytes. A token's bytes are a piece of UTF-8 text, not always
// a whole character: decoded text is the concatenation of the pieces.
//
// Encoding text into GPT-2 tokens needs the BPE merges, which this file does not carry.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mpf {

struct Tokenizer {
  std::vector<std::string> pieces;  // the bytes of each token id
  int32_t eot = -1;                 // end-of-text id, -1 when unknown
  int version = 0;

  int vocab() const { return int(pieces.size()); }
  // The bytes of token `id` (0 <= id < vocab()).
  const std::string& decode(int32_t id) const { return pieces[size_t(id)]; }
};

// Reads and validates a tokenizer file. Version 1 carries no end-of-text id: as llm.c does, GPT-2's
// 50256 is taken when the vocabulary is GPT-2's 50257 tokens, else there is none. Throws
// InputError naming the file, the problem and the fix for: a missing or unreadable file, one
// shorter than its header, a wrong magic (naming an llm.c model file or token shard when it is
// one), a version other than 1 or 2, a vocabulary size that is not positive, an end-of-text id
// outside the vocabulary, fewer records than the vocabulary size, a record of length 0 or running
// past the end of the file, and bytes after the last record.
Tokenizer read_tokenizer(const std::string& path);

}  // namespace mpf
