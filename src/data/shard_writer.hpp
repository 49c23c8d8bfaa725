// Token shards written collectively from a stream of tokens whose pieces lie on many ranks
// (mpiformer-tokenize; docs/data.md). The stream is the corpus's tokens in order, cut in two:
// the validation split (positions [0, V), one shard; the caller picks V at a document's end) and
// the training split ([V, total), shards of S tokens, the last one shorter).
// Every rank writes its own pieces at their offsets with MPI-IO, so no rank holds more than its
// part and the files do not depend on the rank count.
//
// Shards are llm.c's: GPT-2's header and uint16 tokens, or Llama 3's and uint32 (width 4).
// Named <name>_val_000000.bin, then <name>_train_000001.bin, ... (from 000000 without a
// validation split), as llm.c's data scripts name them. Each is written under <file>.partial
// and renamed into place (publish), never over an existing file, only when every shard is
// complete and the caller's manifest is written; a run that fails leaves no shard behind.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/parallel_file.hpp"

namespace mpf {

struct ShardLayout {
  std::string dir, name;
  int width = 2;             // bytes per token: 2 (uint16) or 4 (uint32)
  int64_t shard_tokens = 0;  // S, at most 2^31 - 1
  bool validation = false;   // the stream starts with a validation split
};

struct ShardInfo {
  std::string file;   // the name in the directory
  std::string split;  // "val" or "train"
  int64_t tokens = 0;
  std::string sha256;  // of the whole file
};

class ShardWriter {
 public:
  // Collective over comm; opens the validation shard when there is one.
  ShardWriter(MPI_Comm comm, ShardLayout layout);
  // Unfinished (an error): closes what is open and removes every partial file (collective).
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // The end of the validation split, once the caller knows it (the same on every rank).
  void set_validation_end(int64_t v);
  bool validation_end_known() const { return val_end_ >= 0; }
  int64_t validation_end() const { return val_end_; }

  // Collective: this rank's tokens at stream positions [begin, begin + tokens.size()); every
  // rank's lie in [round_begin, round_end), and no later call writes below round_end.
  // Throws InputError (on every rank alike) when a write fails.
  void write(int64_t round_begin, int64_t round_end, int64_t begin,
             const std::vector<int32_t>& tokens);
  // The same for `count` tokens that `read` gives a piece at a time: read(from, n, out) puts this
  // rank's tokens [from, from + n) of the `count` in out (n at most kPieceTokens), so tokens kept
  // outside memory (a spool file) are written without being held whole.
  static constexpr int64_t kPieceTokens = int64_t(1) << 20;
  using TokenReader = std::function<void(int64_t from, int64_t n, int32_t* out)>;
  void write(int64_t round_begin, int64_t round_end, int64_t begin, int64_t count,
             const TokenReader& read);

  // Collective: the stream has `total` tokens. Closes the last shards and hashes every shard (the
  // ranks share the work). Returns them in order, still under their .partial names.
  std::vector<ShardInfo> finish(int64_t total);

  // Collective, after finish: rank 0 renames the shards into place, never over a file, then runs
  // `seal` (which puts the manifest that lists them in place, and returns "" or what failed). If a
  // rename or `seal` fails, the shards moved are removed again and every rank throws InputError:
  // the shards appear only together with their manifest.
  void publish(const std::function<std::string()>& seal);

  static std::string file_name(const ShardLayout& layout, bool val, int index);

 private:
  int train_index(int64_t k) const { return int(k) + (layout_.validation ? 1 : 0); }
  void open_train(int64_t k);
  void close(int index, int64_t tokens);
  void put(ParallelFile& f, int64_t offset, const TokenReader& read, int64_t from, int64_t n);
  void check(const std::string& agreed) const;

  MPI_Comm comm_;
  int rank_ = 0;
  ShardLayout layout_;
  int64_t val_end_ = -1;                               // -1: not known yet
  int64_t train_opened_ = 0;                           // training shards opened so far
  std::map<int, std::unique_ptr<ParallelFile>> open_;  // by shard index
  std::vector<ShardInfo> closed_;                      // by shard index
  std::vector<std::string> partials_;                  // every file created, by index
  bool published_ = false;
};

}  // namespace mpf
