#include "data/token_stream.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/error.hpp"
#include "core/text_affixes.hpp"
#include "io/input_file.hpp"

// The formats are little-endian and are read and written with plain memcpy.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "llm.c files are little-endian");

namespace mpf {
namespace {

using llmc::kHeaderBytes;
using llmc::kHeaderInts;
// Text is read in pieces so a large file never exists twice in memory.
constexpr int64_t kChunkTokens = 1 << 20;

// A data file, open for reading, and its size in bytes (not 0).
File open_data_file(const std::string& path, int64_t& bytes) {
  File f = open_for_reading(path, "data file " + path, "a token shard or a text file", bytes);
  require(bytes > 0, "data file " + path + ": the file is empty; pass a file that holds tokens");
  return f;
}

void read_data(std::FILE* f, void* dst, size_t bytes, const std::string& path) {
  read_exact(f, dst, bytes, "data file " + path);
}

// Every token must index the model's embedding table; the message names the first bad one and
// the smallest vocabulary that would hold the whole file.
template <class T>
void check_tokens(const T* begin, int64_t n, int vocab, const std::string& what,
                  const std::string& fix) {
  const T* end = begin + n;
  const T* bad = std::find_if(begin, end, [vocab](T t) { return int64_t(t) >= vocab; });
  if (bad == end) return;
  const int64_t position = bad - begin;
  const int64_t largest = *std::max_element(begin, end);
  throw InputError(what + ": token " + std::to_string(*bad) + " at position " +
                   std::to_string(position) + " is >= vocab " + std::to_string(vocab) +
                   " (largest token " + std::to_string(largest) + "); pass --vocab " +
                   std::to_string(largest + 1) + " or more, or " + fix);
}

}  // namespace

struct TokenStream::Mapping {
  void* addr = MAP_FAILED;
  size_t bytes = 0;
  ~Mapping() {
    if (addr != MAP_FAILED) munmap(addr, bytes);
  }
};

TokenStream::TokenStream(const std::string& path, int vocab, bool as_bytes) : path_(path) {
  require(vocab > 0, "data file " + path + ": vocab must be positive, got " +
                         std::to_string(vocab) + "; pass --vocab");
  int64_t bytes = 0;
  File f = open_data_file(path, bytes);
  const std::string what = "data file " + path;

  int32_t header[kHeaderInts] = {};
  const size_t head = static_cast<size_t>(std::min<int64_t>(bytes, kHeaderBytes));
  read_data(f.get(), header, head, path);
  const bool magic16 = !as_bytes && head >= sizeof(int32_t) && header[0] == llmc::kShardMagic;
  const bool magic32 = !as_bytes && head >= sizeof(int32_t) && header[0] == llmc::kShardMagicUint32;
  const bool has_magic = magic16 || magic32;

  // A .bin that cannot even hold a header is a broken shard, not text someone meant to train on.
  require(bytes >= kHeaderBytes || !(has_magic || ends_with(path, ".bin")),
          what + ": " + std::to_string(bytes) +
              " bytes is too short for an llm.c shard (the header " +
              "alone is 1024 bytes); the shard is truncated or corrupt, regenerate it");
  require(
      !(head >= sizeof(int32_t) && header[0] == llmc::kCheckpointMagic),
      what +
          ": this is an llm.c model checkpoint, not token data; pass a token shard or text file");
  require(
      !(head >= sizeof(int32_t) && header[0] == llmc::kTokenizerMagic),
      what + ": this is an llm.c tokenizer file, not token data; pass a token shard or text file");
  // A .bin without a shard's magic is a damaged shard, not text to train on as bytes (unless
  // asked: bytes:).
  require(as_bytes || has_magic || !ends_with(path, ".bin"),
          what + ": not an llm.c token shard: its magic " + std::to_string(header[0]) +
              " is neither " + std::to_string(llmc::kShardMagic) + " (uint16 tokens) nor " +
              std::to_string(llmc::kShardMagicUint32) +
              " (uint32); the header is damaged, regenerate the shard, or pass --data bytes:" +
              path + " to train on the file's raw bytes");

  if (has_magic) {
    is_shard_ = true;
    width_ = magic16 ? 2 : 4;
    const int32_t version = magic16 ? llmc::kShardVersion : llmc::kShardVersionUint32;
    require(header[1] == version,
            what + ": shard version " + std::to_string(header[1]) + " with magic " +
                std::to_string(header[0]) + ", only version " + std::to_string(version) +
                " is supported; regenerate the shard with mpiformer-tokenize or llm.c's " +
                "data scripts");
    const int64_t n = header[2];
    require(n > 0, what + ": corrupt shard header (token count " + std::to_string(n) +
                       "); regenerate the shard");
    const int64_t expected = kHeaderBytes + width_ * n;
    require(bytes == expected, what + ": size mismatch: header says " + std::to_string(n) +
                                   " tokens of " + std::to_string(width_) + " bytes, so expected " +
                                   std::to_string(expected) + " bytes, but the file has " +
                                   std::to_string(bytes) +
                                   "; the shard is truncated or corrupt, regenerate it");
    mapping_ = std::make_shared<Mapping>();
    mapping_->bytes = static_cast<size_t>(bytes);
    mapping_->addr = mmap(nullptr, mapping_->bytes, PROT_READ, MAP_SHARED, fileno(f.get()), 0);
    require(mapping_->addr != MAP_FAILED,
            what + ": cannot map the file (" + errno_text() + "); check that it is readable");
    const char* body = static_cast<const char*>(mapping_->addr) + kHeaderBytes;
    size_ = n;
    if (width_ == 2) {
      data16_ = reinterpret_cast<const uint16_t*>(body);
      check_tokens(data16_, size_, vocab, what, "regenerate the shard");
    } else {
      data32_ = reinterpret_cast<const uint32_t*>(body);
      check_tokens(data32_, size_, vocab, what, "regenerate the shard");
    }
  } else {
    // Plain text: byte-level tokens 0..255, so the bytes already read are the first tokens.
    owned16_.resize(bytes);
    const auto* bytes_read = reinterpret_cast<const unsigned char*>(header);
    std::copy(bytes_read, bytes_read + head, owned16_.begin());
    std::vector<unsigned char> chunk(std::min(bytes, kChunkTokens));
    for (int64_t done = static_cast<int64_t>(head); done < bytes;) {
      const int64_t count = std::min(bytes - done, kChunkTokens);
      read_data(f.get(), chunk.data(), count, path);
      std::copy(chunk.begin(), chunk.begin() + count, owned16_.begin() + done);
      done += count;
    }
    data16_ = owned16_.data();
    size_ = bytes;
    check_tokens(data16_, size_, vocab, what + " (text, one token per byte)",
                 "use a vocabulary of at least 256 for text files");
  }
}

TokenStream::TokenStream(std::string name, std::vector<int32_t> tokens, int vocab)
    : path_(std::move(name)) {
  require(vocab > 0,
          path_ + ": vocab must be positive, got " + std::to_string(vocab) + "; pass --vocab");
  require(!tokens.empty(), path_ + ": holds no tokens; pass a data source that holds tokens");
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string where =
        path_ + ": token " + std::to_string(tokens[i]) + " at position " + std::to_string(i);
    require(tokens[i] >= 0, where + " is negative; use another data source");
  }
  owned32_.assign(tokens.begin(), tokens.end());
  width_ = 4;
  data32_ = owned32_.data();
  size_ = static_cast<int64_t>(owned32_.size());
  check_tokens(data32_, size_, vocab, path_, "use another data source");
}

void TokenStream::read(int64_t begin, int64_t n, int32_t* dst) const {
  if (width_ == 2) {
    std::copy(data16_ + begin, data16_ + begin + n, dst);
  } else {
    std::copy(data32_ + begin, data32_ + begin + n, dst);
  }
}

std::vector<int32_t> shard_header(int64_t n, int width) {
  std::vector<int32_t> header(kHeaderInts, 0);
  header[0] = width == 2 ? llmc::kShardMagic : llmc::kShardMagicUint32;
  header[1] = width == 2 ? llmc::kShardVersion : llmc::kShardVersionUint32;
  header[2] = static_cast<int32_t>(n);
  return header;
}

namespace {

template <class T>
void write_shard_of(const std::string& path, const std::vector<T>& tokens) {
  const std::string what = "shard " + path;
  require(!tokens.empty() && tokens.size() <= size_t(INT32_MAX),
          what + ": cannot hold " + std::to_string(tokens.size()) +
              " tokens (1 to 2^31-1 per shard); split the data into several shards");
  // O_EXCL makes the existence check and the creation one step, so nothing is overwritten.
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  require(fd >= 0 || errno != EEXIST, what + ": already exists; remove it or choose another path");
  require(fd >= 0, what + ": cannot create (" + errno_text() + "); check the directory");
  File f(fdopen(fd, "wb"));
  if (!f) {
    const std::string reason = errno_text();
    close(fd);
    std::remove(path.c_str());
    throw InputError(what + ": cannot open for writing (" + reason + ")");
  }

  const std::vector<int32_t> header = shard_header(int64_t(tokens.size()), int(sizeof(T)));
  bool ok = std::fwrite(header.data(), kHeaderBytes, 1, f.get()) == 1 &&
            std::fwrite(tokens.data(), sizeof(T), tokens.size(), f.get()) == tokens.size();
  ok = (std::fclose(f.release()) == 0) && ok;
  if (!ok) {
    const std::string reason = errno_text();
    std::remove(path.c_str());  // a partial shard would later read as corrupt
    throw InputError(what + ": write failed (" + reason + "); check free space and permissions");
  }
}

}  // namespace

void write_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
  write_shard_of(path, tokens);
}

void write_shard_uint32(const std::string& path, const std::vector<uint32_t>& tokens) {
  write_shard_of(path, tokens);
}

}  // namespace mpf
