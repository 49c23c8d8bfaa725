// One token source: an llm.c shard (.bin) or a plain text file (byte-level tokens, ids 0..255).
//
// llm.c shard: 256 int32 header (magic 20240520, version 1, token count n), then n uint16 tokens;
// the file size must be exactly 1024 + 2n. Any other file is read as text, one token per byte.
// Every token is checked against the model's vocabulary when the file is opened, so a bad id is
// reported with its file and position instead of indexing out of bounds later.
//
// Tokens are held as uint16 (the shard format's width). A shard is memory-mapped rather than
// copied, so the ranks on a node share one copy in the page cache however large the data is.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/llmc_format.hpp"

namespace mpf {

class TokenStream {
 public:
  // Throws InputError (naming the file, the problem and the fix) if the file is missing,
  // unreadable, a shard whose header or size is wrong, or holds a token >= vocab.
  TokenStream(const std::string& path, int vocab);
  // An in-memory stream (the built-in corpus); `name` stands in for the path in messages.
  TokenStream(std::string name, std::vector<int32_t> tokens, int vocab);
  // Move-only: data() points into this object's own storage or mapping.
  TokenStream(TokenStream&&) = default;
  TokenStream& operator=(TokenStream&&) = default;
  TokenStream(const TokenStream&) = delete;
  TokenStream& operator=(const TokenStream&) = delete;

  const std::string& path() const { return path_; }
  int64_t size() const { return size_; }
  const uint16_t* data() const { return data_; }
  bool is_shard() const { return is_shard_; }

 private:
  struct Mapping;  // an mmap'd file, unmapped when the last stream holding it goes
  std::string path_;
  bool is_shard_ = false;
  std::shared_ptr<Mapping> mapping_;  // shards
  std::vector<uint16_t> owned_;       // text files and in-memory corpora
  const uint16_t* data_ = nullptr;
  int64_t size_ = 0;
};

// Writes an llm.c shard (used by tests and by tools that prepare data). Refuses to overwrite an
// existing file (throws InputError).
void write_shard(const std::string& path, const std::vector<uint16_t>& tokens);

}  // namespace mpf
