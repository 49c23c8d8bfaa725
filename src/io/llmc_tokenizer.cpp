#include "io/llmc_tokenizer.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/error.hpp"
#include "io/input_file.hpp"
#include "io/llmc_format.hpp"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "llm.c files are little-endian");

namespace mpf {

namespace {
constexpr int32_t kGpt2Vocab = 50257, kGpt2Eot = 50256;

std::string tokenizer_name(const std::string& path) {
  return "tokenizer " + path;
}

std::string magic_name(int32_t magic) {
  if (magic == llmc::kCheckpointMagic) return "an llm.c model file";
  if (magic == llmc::kShardMagic) return "an llm.c token shard";
  return "not an llm.c tokenizer file";
}
}  // namespace

Tokenizer read_tokenizer(const std::string& path) {
  int64_t size = 0;
  const File f = open_for_reading(path, tokenizer_name(path),
                                  "llm.c's gpt2_tokenizer.bin (its train_gpt2.py writes it)", size);
  // The whole file at once: 50257 tokens are about 0.3 MB.
  std::string bytes(size_t(size), '\0');
  require(
      std::fread(bytes.data(), 1, bytes.size(), f.get()) == bytes.size(),
      tokenizer_name(path) + ": read failed; the file changed while being read or is unreadable");
  const std::string fix = "; the file is truncated or corrupt: fetch gpt2_tokenizer.bin again";
  require(int64_t(bytes.size()) >= llmc::kHeaderBytes,
          tokenizer_name(path) + ": " + std::to_string(bytes.size()) +
              " bytes is too short for the 1024-byte header" + fix);
  int32_t h[llmc::kHeaderInts];
  std::memcpy(h, bytes.data(), sizeof h);
  require(h[0] == llmc::kTokenizerMagic,
          tokenizer_name(path) + ": bad magic " + std::to_string(h[0]) + " (expected " +
              std::to_string(llmc::kTokenizerMagic) + "): " + magic_name(h[0]) +
              "; pass llm.c's gpt2_tokenizer.bin");
  require(h[1] == 1 || h[1] == 2, tokenizer_name(path) + ": unsupported version " +
                                      std::to_string(h[1]) +
                                      "; versions 1 and 2 (llm.c's) are read");
  const int32_t n = h[2];
  require(n > 0, tokenizer_name(path) + ": vocabulary size " + std::to_string(n) +
                     " is not positive" + fix);
  Tokenizer t;
  t.version = h[1];
  t.eot = h[1] == 2 ? h[3] : (n == kGpt2Vocab ? kGpt2Eot : -1);
  require(t.eot >= -1 && t.eot < n && (h[1] == 1 || t.eot >= 0),
          tokenizer_name(path) + ": end-of-text id " + std::to_string(h[3]) +
              " is outside the vocabulary of " + std::to_string(n) + " tokens" + fix);
  // Each record takes at least 2 bytes: a corrupt size cannot make this allocate more than the
  // file could hold.
  t.pieces.reserve(std::min<size_t>(size_t(n), (bytes.size() - llmc::kHeaderBytes) / 2));
  size_t at = size_t(llmc::kHeaderBytes);
  for (int32_t id = 0; id < n; ++id) {
    require(at < bytes.size(), tokenizer_name(path) + ": ends after " + std::to_string(id) +
                                   " of " + std::to_string(n) + " tokens" + fix);
    const size_t length = static_cast<unsigned char>(bytes[at++]);
    require(length > 0,
            tokenizer_name(path) + ": token " + std::to_string(id) + " has length 0" + fix);
    require(at + length <= bytes.size(), tokenizer_name(path) + ": token " + std::to_string(id) +
                                             " (" + std::to_string(length) +
                                             " bytes) runs past the end of the file" + fix);
    t.pieces.emplace_back(bytes.data() + at, length);
    at += length;
  }
  require(at == bytes.size(), tokenizer_name(path) + ": " + std::to_string(bytes.size() - at) +
                                  " bytes after the last of its " + std::to_string(n) +
                                  " tokens; the file is corrupt or not a tokenizer of this format");
  return t;
}

}  // namespace mpf
