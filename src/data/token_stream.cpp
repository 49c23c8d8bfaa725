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
#include "io/input_file.hpp"

// The formats are little-endian and are read and written with plain memcpy.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "llm.c files are little-endian");

namespace mpf {
namespace {

using llmc::kHeaderBytes;
using llmc::kHeaderInts;
// Text is read in pieces so a large file never exists twice in memory.
constexpr int64_t kChunkTokens = 1 << 20;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

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
void check_tokens(const uint16_t* begin, int64_t n, int vocab, const std::string& what,
                  const std::string& fix) {
  const uint16_t* end = begin + n;
  const uint16_t* bad = std::find_if(begin, end, [vocab](uint16_t t) { return t >= vocab; });
  if (bad == end) return;
  const int64_t position = bad - begin;
  const int32_t largest = *std::max_element(begin, end);
  throw InputError(what + ": token " + std::to_string(*bad) + " at position " +
                   std::to_string(position) + " is >= vocab " + std::to_string(vocab) +
                   " (largest token " + std::to_string(largest) + "); pass --vocab " +
                   std::to_string(int64_t(largest) + 1) + " or more, or " + fix);
}

}  // namespace

struct TokenStream::Mapping {
  void* addr = MAP_FAILED;
  size_t bytes = 0;
  ~Mapping() {
    if (addr != MAP_FAILED) munmap(addr, bytes);
  }
};

TokenStream::TokenStream(const std::string& path, int vocab) : path_(path) {
  require(vocab > 0, "data file " + path + ": vocab must be positive, got " +
                         std::to_string(vocab) + "; pass --vocab");
  int64_t bytes = 0;
  File f = open_data_file(path, bytes);
  const std::string what = "data file " + path;

  int32_t header[kHeaderInts] = {};
  const size_t head = static_cast<size_t>(std::min<int64_t>(bytes, kHeaderBytes));
  read_data(f.get(), header, head, path);
  const bool has_magic = head >= sizeof(int32_t) && header[0] == llmc::kShardMagic;

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

  if (has_magic) {
    is_shard_ = true;
    require(header[1] == llmc::kShardVersion,
            what + ": shard version " + std::to_string(header[1]) + ", only version " +
                std::to_string(llmc::kShardVersion) +
                " is supported; regenerate the shard with llm.c's " + "data scripts");
    const int64_t n = header[2];
    require(n > 0, what + ": corrupt shard header (token count " + std::to_string(n) +
                       "); regenerate the shard");
    const int64_t expected = kHeaderBytes + 2 * n;
    require(bytes == expected, what + ": size mismatch: header says " + std::to_string(n) +
                                   " tokens, so expected " + std::to_string(expected) +
                                   " bytes, but the file has " + std::to_string(bytes) +
                                   "; the shard is truncated or corrupt, regenerate it");
    mapping_ = std::make_shared<Mapping>();
    mapping_->bytes = static_cast<size_t>(bytes);
    mapping_->addr = mmap(nullptr, mapping_->bytes, PROT_READ, MAP_SHARED, fileno(f.get()), 0);
    require(mapping_->addr != MAP_FAILED,
            what + ": cannot map the file (" + errno_text() + "); check that it is readable");
    data_ =
        reinterpret_cast<const uint16_t*>(static_cast<const char*>(mapping_->addr) + kHeaderBytes);
    size_ = n;
    check_tokens(data_, size_, vocab, what, "regenerate the shard");
  } else {
    // Plain text: byte-level tokens 0..255, so the bytes already read are the first tokens.
    owned_.resize(bytes);
    const auto* bytes_read = reinterpret_cast<const unsigned char*>(header);
    std::copy(bytes_read, bytes_read + head, owned_.begin());
    std::vector<unsigned char> chunk(std::min(bytes, kChunkTokens));
    for (int64_t done = static_cast<int64_t>(head); done < bytes;) {
      const int64_t count = std::min(bytes - done, kChunkTokens);
      read_data(f.get(), chunk.data(), count, path);
      std::copy(chunk.begin(), chunk.begin() + count, owned_.begin() + done);
      done += count;
    }
    data_ = owned_.data();
    size_ = bytes;
    check_tokens(data_, size_, vocab, what + " (text, one token per byte)",
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
    require(tokens[i] <= UINT16_MAX,
            where + " does not fit the 16-bit token format; use another data source");
  }
  owned_.assign(tokens.begin(), tokens.end());
  data_ = owned_.data();
  size_ = static_cast<int64_t>(owned_.size());
  check_tokens(data_, size_, vocab, path_, "use another data source");
}

void write_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
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

  int32_t header[kHeaderInts] = {};
  header[0] = llmc::kShardMagic;
  header[1] = llmc::kShardVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  bool ok = std::fwrite(header, sizeof header, 1, f.get()) == 1 &&
            std::fwrite(tokens.data(), sizeof(uint16_t), tokens.size(), f.get()) == tokens.size();
  ok = (std::fclose(f.release()) == 0) && ok;
  if (!ok) {
    const std::string reason = errno_text();
    std::remove(path.c_str());  // a partial shard would later read as corrupt
    throw InputError(what + ": write failed (" + reason + "); check free space and permissions");
  }
}

}  // namespace mpf
