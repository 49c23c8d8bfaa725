// The batch order (docs/design.md, invariant 2; llm.c's DataLoader with shuffling off):
// batch k of B rows of T tokens is the B*T + 1 consecutive tokens starting at the current
// position; row b is the window [pos + b*T, pos + b*T + T), targets are inputs shifted by one.
// After a batch the position advances by B*T. When the next batch would run past the end of the
// current file, the loader moves to the start of the next file (after the last, back to the
// first), so one file wraps to its own start.
//
// Data parallel: the global batch is the same for every layout; rank d of D takes rows
// [d*B/D, (d+1)*B/D) of it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/token_stream.hpp"

namespace mpf {

// Where the next batch starts: a file of the resolved list and a token in it.
struct DataPosition {
  int64_t file = 0, token = 0;
};

class DataLoader {
 public:
  // `pattern` is one path, a comma-separated list of paths, or a glob ("data/train_*.bin"); a
  // glob's matches are taken in sorted order, a list's entries in the order given (an entry may
  // itself be a glob). "builtin:train" and "builtin:val" name the corpus embedded in the program
  // (data/builtin_corpus.hpp). Every file is read and its tokens checked here. Throws InputError
  // if a glob matches nothing, a file is bad (see TokenStream), or a file holds fewer than
  // B*T + 1 tokens (it could never yield a batch: the message says how many it needs).
  DataLoader(const std::string& pattern, int B, int T, int vocab);

  // Fills inputs and targets, each (rows, T) row-major, with rows [row_begin, row_begin + rows) of
  // the next global batch, then advances to the batch after it.
  void next_batch(int row_begin, int rows, int32_t* inputs, int32_t* targets);

  // Back to the first batch (validation restarts at the beginning each time).
  void reset();

  // A resumed run continues where the saved one stopped. seek() throws InputError if the
  // position lies outside these files.
  DataPosition position() const { return {int64_t(file_), pos_}; }
  void seek(const DataPosition& p);

  int B() const { return B_; }
  int T() const { return T_; }
  int64_t total_tokens() const;
  const std::vector<TokenStream>& files() const { return files_; }

 private:
  int B_, T_;
  std::vector<TokenStream> files_;
  size_t file_ = 0;
  int64_t pos_ = 0;
};

}  // namespace mpf
