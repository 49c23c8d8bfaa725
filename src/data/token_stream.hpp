// One token source: an llm.c shard (.bin) or a plain text file (byte-level tokens, ids 0..255).
//
// llm.c shards: a 256 int32 header (magic, version, token count n), then n tokens: GPT-2's
// (magic 20240520, version 1) holds uint16 tokens, Llama 3's (magic 20240801, version 7) uint32;
// the file size must be exactly 1024 + width·n. Any other file is read as text, one token per
// byte, but a .bin without a shard's magic is an error: a shard whose header was damaged would
// otherwise train as bytes; `as_bytes` (the loader's bytes:PATH) takes its bytes all the same.
// Every token is checked against the model's vocabulary when the file is opened, so a bad id is
// reported with its file and position instead of indexing out of bounds later.
//
// Tokens are held at the shard's width. A shard is memory-mapped rather than copied, so the
// ranks on a node share one copy in the page cache however large the data is.
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
  TokenStream(const std::string& path, int vocab, bool as_bytes = false);
  // An in-memory stream (the built-in corpus); `name` stands in for the path in messages.
  TokenStream(std::string name, std::vector<int32_t> tokens, int vocab);
  // Move-only: data() points into this object's own storage or mapping.
  TokenStream(TokenStream&&) = default;
  TokenStream& operator=(TokenStream&&) = default;
  TokenStream(const TokenStream&) = delete;
  TokenStream& operator=(const TokenStream&) = delete;

  const std::string& path() const { return path_; }
  int64_t size() const { return size_; }
  bool is_shard() const { return is_shard_; }
  // Bytes per token as held: 2 (uint16 shards, text) or 4 (uint32 shards, in-memory streams).
  int width() const { return width_; }

  // Copies tokens [begin, begin + n) into dst (the caller keeps them inside [0, size())).
  void read(int64_t begin, int64_t n, int32_t* dst) const;
  int32_t token(int64_t i) const { return width_ == 2 ? int32_t(data16_[i]) : int32_t(data32_[i]); }

 private:
  struct Mapping;  // an mmap'd file, unmapped when the last stream holding it goes
  std::string path_;
  bool is_shard_ = false;
  std::shared_ptr<Mapping> mapping_;  // shards
  std::vector<uint16_t> owned16_;     // text files
  std::vector<uint32_t> owned32_;     // in-memory corpora
  int width_ = 2;
  const uint16_t* data16_ = nullptr;  // width 2
  const uint32_t* data32_ = nullptr;  // width 4
  int64_t size_ = 0;
};

// Writes an llm.c shard (used by tests and by tools that prepare data): GPT-2's uint16 format, or
// Llama 3's uint32 one (write_shard_uint32). Refuses to overwrite an existing file (throws
// InputError).
void write_shard(const std::string& path, const std::vector<uint16_t>& tokens);
void write_shard_uint32(const std::string& path, const std::vector<uint32_t>& tokens);

// The 1024-byte header of a shard of n tokens of `width` bytes (2 or 4), llm.c's layout.
std::vector<int32_t> shard_header(int64_t n, int width);

}  // namespace mpf
